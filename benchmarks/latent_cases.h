// mha_bench cases for multi-head latent attention (DeepSeek V2/V3's MLA): the
// absorbed decode's attention over a latent cache.
#pragma once

namespace mha::bench {

void RegisterLatentCases();

}  // namespace mha::bench
