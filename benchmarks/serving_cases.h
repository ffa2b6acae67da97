// mha_bench cases for serving over a paged KV cache: a continuous-batching step that
// mixes prefill chunks and decodes (and its two parts alone), one long-context
// decode against the read bandwidth, and prefix sharing's memory.
#pragma once

namespace mha::bench {

void RegisterServingCases();

}  // namespace mha::bench
