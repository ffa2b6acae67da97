// libFuzzer target: a safetensors file read and loaded as a layer, then one forward.
// The first byte picks num_heads and num_kv_heads; the rest is the file.
#include "src/io/layer_file.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mha::fuzz::FuzzInput input(data, size);
  const uint8_t heads = input.Byte();
  const std::string path = mha::fuzz::WriteTemp("layer.safetensors", input.Rest());
  try {
    const mha::io::LoadedLayer layer =
        mha::io::LoadLayer(path, 1 + heads % 4, (heads >> 2) % 3);
    const mha::MultiheadAttention attention(layer.config, layer.weights);
    const int64_t dim = layer.config.query_dim;
    if (dim > 4096) return 0;  // a valid layer, too wide to run per input
    std::vector<float> x(2 * dim, 0.5f), out(2 * attention.output_dim());
    attention.Forward(
        {mha::TensorView(x.data(), mha::Shape{2, dim}), {}, {}}, {},
        {mha::MutableTensorView(out.data(), mha::Shape{2, attention.output_dim()}), {}});
  } catch (const mha::io::FileError&) {
  } catch (const mha::Error&) {
  }
  return 0;
}
