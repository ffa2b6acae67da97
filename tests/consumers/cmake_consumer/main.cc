// Links libmha.a through find_package(mha) and runs a causal self-attention.
#include <mha/mha.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

int main() {
  const int64_t e = 16, s = 5;
  std::vector<float> in_proj(3 * e * e, 0.02f), out_proj(e * e, 0.03f), x(s * e),
      out(s * e);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i));
  const mha::MultiheadAttention attention(
      {4, e / 4, e, 0, 0, {}, 0},
      mha::FromPackedInProjection({in_proj.data(), mha::Shape{3 * e, e}}, {},
                                  {out_proj.data(), mha::Shape{e, e}}, {}));
  mha::AttentionMasks masks;
  masks.is_causal = true;
  attention.Forward({{x.data(), mha::Shape{s, e}}, {}, {}}, masks,
                    {{out.data(), mha::Shape{s, e}}, {}});
  for (float v : out) {
    if (!std::isfinite(v)) return 1;
  }
  // Weights from files link from the package too (mha/layer_file.hpp): a missing file
  // is an mha::Error naming it.
  try {
    mha::LayerFile::Read("no_such_weights.safetensors", 4);
    return 1;
  } catch (const mha::Error& e) {
    if (std::string(e.what()).find("no_such_weights.safetensors") == std::string::npos)
      return 1;
  }
  std::printf("cmake consumer: ok, out[0] = %f\n", out[0]);
  return 0;
}
