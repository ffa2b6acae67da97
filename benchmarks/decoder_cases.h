// mha_bench cases for today's decoder models: the attention core alone on ggml's
// shapes, RoPE's cost, a Llama 3 8B prefill layer and a Mistral sliding window.
#pragma once

namespace mha::bench {

void RegisterDecoderCases();

}  // namespace mha::bench
