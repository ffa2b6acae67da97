// LoadLayer, and its public face mha::LayerFile: the state_dict names of a safetensors
// file.
#include "src/io/layer_file.h"

#include <utility>

#include "mha/error.hpp"
#include "mha/layer_file.hpp"

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

namespace mha {

struct LayerFile::Impl {
  io::LoadedLayer layer;
};

LayerFile LayerFile::Read(const std::string& path, int64_t num_heads,
                          int64_t num_kv_heads, const std::string& prefix) {
  try {
    return LayerFile(std::make_unique<Impl>(
        Impl{io::LoadLayer(path, num_heads, num_kv_heads, prefix)}));
  } catch (const io::FileError& e) {  // the public API's one exception type
    throw Error(std::string("mha: ") + e.what());
  }
}

LayerFile::LayerFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LayerFile::~LayerFile() = default;
LayerFile::LayerFile(LayerFile&&) noexcept = default;
LayerFile& LayerFile::operator=(LayerFile&&) noexcept = default;

const AttentionConfig& LayerFile::config() const { return impl_->layer.config; }
const AttentionWeights& LayerFile::weights() const { return impl_->layer.weights; }

}  // namespace mha
