// mha.PagedKvCache and layer.forward_packed: the paged cache of a continuous-batching
// server (paged_kv_cache.hpp) from Python. A pool too small for a call raises
// mha.OutOfBlocksError (a ValueError, as mha::OutOfBlocksError is an mha::Error),
// leaving the cache as it was.
#include <pybind11/stl.h>

#include <memory>
#include <vector>

#include "src/python/arrays.h"
#include "src/python/bindings.h"
#include "src/python/docstrings.h"
#include "src/python/layer_types.h"

namespace mha::python {
namespace {

using PyPagedKvCache = Guarded<PagedKvCache>;

std::unique_ptr<PyPagedKvCache> NewPagedCache(py::handle layer, int64_t num_blocks,
                                              int64_t max_sequences, int64_t block_size,
                                              int64_t num_layers, DType storage,
                                              KvScales scales, int64_t sliding_window,
                                              int64_t attention_chunk_size) {
  PagedKvCacheOptions options;
  options.num_blocks = num_blocks;
  options.max_sequences = max_sequences;
  options.block_size = block_size;
  options.num_layers = num_layers;
  options.storage = storage;
  options.scales = scales;
  options.sliding_window = sliding_window;
  options.attention_chunk_size = attention_chunk_size;
  return WithCacheConfig(layer, [&](const auto& config) {
    return std::make_unique<PyPagedKvCache>(config, options);
  });
}

py::dict StatsOf(const PagedKvCacheStats& stats) {
  py::dict out;
  out["num_blocks"] = stats.num_blocks;
  out["free_blocks"] = stats.free_blocks;
  out["used_blocks"] = stats.used_blocks;
  out["shared_blocks"] = stats.shared_blocks;
  out["sequences"] = stats.sequences;
  out["bytes_per_block"] = stats.bytes_per_block;
  out["residual_bytes"] = stats.residual_bytes;
  return out;
}

py::object ForwardPacked(const PyLayer<MultiheadAttention>& self, py::handle query_object,
                         py::handle sequence_ids_object,
                         py::handle query_start_loc_object, Guarded<PagedKvCache>& cache,
                         int64_t layer, py::handle position_ids_object,
                         py::handle tree_parents_object, int num_threads, bool kv_shared,
                         bool batch_invariant, py::handle out) {
  const Input query = ActivationInput(query_object, "query");
  const Input sequence_ids = IndexInput(sequence_ids_object, "sequence_ids");
  const Input query_start_loc = IndexInput(query_start_loc_object, "query_start_loc");
  const Input position_ids = IndexInput(position_ids_object, "position_ids");
  const Input tree_parents = IndexInput(tree_parents_object, "tree_parents");
  if (query.view.shape.rank() != 2) {
    throw py::value_error("mha: query: expected [T, query_dim], got " +
                          query.view.shape.ToString());
  }
  const Shape output_shape{query.view.shape[0], self.engine.output_dim()};
  const Output output =
      out.is_none() ? NewOutput(output_shape, query) : CallerOutput(out, output_shape);
  ForwardOptions options;
  options.num_threads = num_threads;
  options.position_ids = position_ids.view;
  options.kv_shared = kv_shared;
  options.batch_invariant = batch_invariant;
  const PackedBatch batch{sequence_ids.view, query_start_loc.view, tree_parents.view};
  cache.Locked([&](PagedKvCache& locked) {
    self.engine.ForwardPacked(query.view, batch, locked, layer, output.view, options);
  });
  return output.Result();
}

}  // namespace

void BindPagedCache(py::module_& m) {
  py::register_exception<OutOfBlocksError>(m, "OutOfBlocksError", PyExc_ValueError);
  py::class_<PyPagedKvCache>(
      m, "PagedKvCache",
      "A paged KV cache: one pool of blocks for a server's sequences (docs/serving.md).")
      .def(py::init(&NewPagedCache), py::arg("layer"), py::arg("num_blocks"),
           py::arg("max_sequences"), py::kw_only(), py::arg("block_size") = 16,
           py::arg("num_layers") = 1, py::arg("storage") = DType::kFloat32,
           py::arg("scales") = KvScales::kPerToken, py::arg("sliding_window") = 0,
           py::arg("attention_chunk_size") = 0, docs::kPagedKvCache)
      .def(
          "add_sequence",
          [](PyPagedKvCache& c, int64_t sequence) {
            c.Locked([&](PagedKvCache& p) { p.AddSequence(sequence); });
          },
          py::arg("sequence"), "An empty sequence under this id.")
      .def(
          "remove_sequence",
          [](PyPagedKvCache& c, int64_t sequence) {
            c.Locked([&](PagedKvCache& p) { p.RemoveSequence(sequence); });
          },
          py::arg("sequence"), "Its blocks return to the pool.")
      .def(
          "fork",
          [](PyPagedKvCache& c, int64_t parent, int64_t child) {
            c.Locked([&](PagedKvCache& p) { p.Fork(parent, child); });
          },
          py::arg("parent"), py::arg("child"),
          "child (a new id) shares parent's blocks, copied on write.")
      .def(
          "truncate",
          [](PyPagedKvCache& c, int64_t sequence, int64_t length) {
            c.Locked([&](PagedKvCache& p) { p.Truncate(sequence, length); });
          },
          py::arg("sequence"), py::arg("length"), "Keeps the first `length` tokens.")
      .def(
          "keep_tokens",
          [](PyPagedKvCache& c, int64_t sequence, int64_t first,
             const std::vector<int64_t>& kept) {
            c.Locked([&](PagedKvCache& p) {
              p.KeepTokens(sequence, first, kept.data(),
                           static_cast<int64_t>(kept.size()));
            });
          },
          py::arg("sequence"), py::arg("first"), py::arg("kept"),
          "After a token-tree step: keeps the tokens at first + kept[k] (the accepted "
          "path, root first), moved to first + k.")
      .def(
          "append_slots",
          [](PyPagedKvCache& c, const std::vector<int64_t>& sequences,
             const std::vector<int64_t>& counts) {
            if (sequences.size() != counts.size()) {
              throw py::value_error(
                  "mha: append_slots: " + std::to_string(sequences.size()) +
                  " sequences but " + std::to_string(counts.size()) + " counts");
            }
            c.Locked([&](PagedKvCache& p) {
              p.AppendSlots(sequences.data(), counts.data(),
                            static_cast<int64_t>(sequences.size()));
            });
          },
          py::arg("sequences"), py::arg("counts"),
          "Room for counts[i] more tokens in sequences[i], in every layer; all or "
          "nothing (OutOfBlocksError leaves the cache as it was).")
      .def(
          "length",
          [](PyPagedKvCache& c, int64_t sequence) {
            return c.Locked([&](PagedKvCache& p) { return p.length(sequence); });
          },
          py::arg("sequence"))
      .def(
          "__contains__",
          [](PyPagedKvCache& c, int64_t sequence) {
            return c.Locked([&](PagedKvCache& p) { return p.contains(sequence); });
          },
          py::arg("sequence"))
      .def(
          "stats",
          [](PyPagedKvCache& c) {
            return StatsOf(c.Locked([](PagedKvCache& p) { return p.stats(); }));
          },
          "num_blocks, free_blocks, used_blocks, shared_blocks, sequences and "
          "bytes_per_block (every layer's K, V and scales), residual_bytes (keys per "
          "channel: the fp32 partial blocks the sequences hold outside the pool).");
  py::reinterpret_borrow<py::class_<PyLayer<MultiheadAttention>>>(
      m.attr("MultiheadAttention"))
      .def("forward_packed", &ForwardPacked, py::arg("query"), py::arg("sequence_ids"),
           py::arg("query_start_loc"), py::arg("cache"), py::arg("layer_index") = 0,
           py::kw_only(), py::arg("position_ids") = py::none(),
           py::arg("tree_parents") = py::none(), py::arg("num_threads") = 0,
           py::arg("kv_shared") = false, py::arg("batch_invariant") = false,
           py::arg("out") = py::none(), docs::kForwardPacked);
}

}  // namespace mha::python
