// LoadLayer: the state_dict names of a safetensors file.
#include "src/io/layer_file.h"

namespace mha::io {

LoadedLayer LoadLayer(const std::string& path, int64_t num_heads, int64_t num_kv_heads,
                      const std::string& prefix) {
  LoadedLayer layer{Safetensors::Read(path, prefix), {}, {}};
  const Safetensors& file = layer.file;
  LayerFromNames named =
      LayerFromStateDict([&file](const std::string& name) { return file.Find(name); },
                         file.Names(), path, num_heads, num_kv_heads);
  layer.config = named.config;
  layer.weights = named.weights;
  return layer;
}

}  // namespace mha::io
