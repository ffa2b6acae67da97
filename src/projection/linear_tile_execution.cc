// LinearPrimitive's tiled execution: the fixed tiles of LinearTiles, each a
// single-threaded oneDNN call on its own stream, scratchpad slice and memory objects
// (kept per thread and tile shape), so that the bits never depend on the thread
// count.
#include <algorithm>
#include <cstring>
#include <exception>

#include "src/base/parallel_for.h"
#include "src/projection/linear_primitive.h"
#include "src/projection/onednn_memory.h"

namespace mha::internal {
namespace {

using dnnl::memory;

size_t ElementBytes(memory::data_type type) {
  return type == memory::data_type::s8 ? 1 : type == memory::data_type::bf16 ? 2 : 4;
}

// Runs body(task, thread) for every task, each oneDNN call in it single-threaded,
// and rethrows the first exception a task threw once all have ended.
template <class Body>
void RunSingleThreadedTasks(int64_t count, int team, const Body& body) {
  std::exception_ptr failure;
  const auto guarded = [&](int64_t task, int thread) {
    try {
      body(task, thread);
    } catch (...) {
#pragma omp critical(mha_linear_failure)
      if (!failure) failure = std::current_exception();
    }
  };
  if (team == 1 || count == 1) {
    const ScopedThreadCount single(1);  // oneDNN threads a call made outside a team
    for (int64_t task = 0; task < count; ++task) guarded(task, 0);
  } else {
    RunTeam(count, team, guarded);
  }
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

// One task's operands: where they start and their sizes.
struct LinearPrimitive::Tile {
  const dnnl::primitive* primitive = nullptr;
  int64_t rows = 0, depth = 0, columns = 0;
  bool partial = false;  // a depth piece: partial sums, no bias
  const void* input = nullptr;
  const void* weights = nullptr;
  const float* bias = nullptr;
  const float* output_scales = nullptr;
  float* output = nullptr;
};

void LinearPrimitive::Run(const void* input, bool input_bf16, int64_t rows, TileRule rule,
                          float* output, LinearCall& call, LinearThreads& threads) const {
  if (rule == TileRule::kBatchInvariant && rows % kInvariantRowGroup != 0) {
    RunPadded(input, input_bf16, rows, output, call, threads);
    return;
  }
  const LinearTiles tiles = PlanLinearTiles(rows, shape_.in_dim, shape_.out_dim, rule);
  const LinearCall::Pieces* pieces =
      tiles.split_depth ? &PreparePieces(call, tiles) : nullptr;
  const int team = TeamSize();
  PrepareThreads(team, tiles, pieces, call, threads);
  const void* typed_input = PrepareInput(input, input_bf16, rows, call);
  PrepareTileMemory(tiles, team, typed_input, output, call, threads, pieces);
  RunSingleThreadedTasks(tiles.tasks(), team, [&](int64_t task, int thread) {
    const Tile tile = MakeTile(tiles, task, typed_input, output, call,
                               threads.partial_sums.data(), pieces);
    RunTile(tile, call.thread_memory[thread], threads, thread);
  });
  if (tiles.split_depth) AddPartialSums(tiles, threads.partial_sums.data(), output);
}

// The padding rows are zeros; their outputs are dropped.
void LinearPrimitive::RunPadded(const void* input, bool input_bf16, int64_t rows,
                                float* output, LinearCall& call,
                                LinearThreads& threads) const {
  const int64_t padded_rows =
      (rows + kInvariantRowGroup - 1) / kInvariantRowGroup * kInvariantRowGroup;
  const size_t row_bytes = static_cast<size_t>(shape_.in_dim) *
                           (input_bf16 ? sizeof(uint16_t) : sizeof(float));
  const size_t input_bytes = row_bytes * static_cast<size_t>(padded_rows);
  if (call.padded_input.size() < input_bytes) call.padded_input.resize(input_bytes);
  const size_t stride = static_cast<size_t>(shape_.output_stride);
  const size_t output_floats = stride * static_cast<size_t>(padded_rows);
  if (call.padded_output.size() < output_floats) call.padded_output.resize(output_floats);
  std::memcpy(call.padded_input.data(), input, row_bytes * static_cast<size_t>(rows));
  std::memset(call.padded_input.data() + row_bytes * static_cast<size_t>(rows), 0,
              row_bytes * static_cast<size_t>(padded_rows - rows));
  Run(call.padded_input.data(), input_bf16, padded_rows, TileRule::kBatchInvariant,
      call.padded_output.data(), call, threads);
  for (int64_t row = 0; row < rows; ++row) {
    std::memcpy(output + row * stride, call.padded_output.data() + row * stride,
                static_cast<size_t>(shape_.out_dim) * sizeof(float));
  }
}

void LinearPrimitive::PrepareThreads(int team, const LinearTiles& tiles,
                                     const LinearCall::Pieces* pieces, LinearCall& call,
                                     LinearThreads& threads) const {
  while (threads.streams.size() < static_cast<size_t>(team))
    threads.streams.emplace_back(engine_);
  size_t scratchpad_bytes = row_tile_scratchpad_bytes_;
  if (pieces) {
    for (const dnnl::primitive& primitive : pieces->primitives) {
      if (primitive)
        scratchpad_bytes = std::max(scratchpad_bytes, ScratchpadBytes(primitive));
    }
  }
  threads.scratchpad_stride =
      std::max(threads.scratchpad_stride, (scratchpad_bytes + 63) / 64 * 64);
  const size_t total_scratchpad = threads.scratchpad_stride * team;
  if (threads.scratchpads.size() < total_scratchpad)
    threads.scratchpads.resize(total_scratchpad);
  if (call.thread_memory.size() < static_cast<size_t>(team))
    call.thread_memory.resize(static_cast<size_t>(team));
  const size_t partial_floats =
      tiles.split_depth
          ? static_cast<size_t>(tiles.depth.count * tiles.rows.extent * shape_.out_dim)
          : 0;
  if (threads.partial_sums.size() < partial_floats)
    threads.partial_sums.resize(partial_floats);
}

LinearPrimitive::Tile LinearPrimitive::MakeTile(const LinearTiles& tiles, int64_t task,
                                                const void* input, float* output,
                                                const LinearCall& call,
                                                float* partial_sums,
                                                const LinearCall::Pieces* pieces) const {
  const size_t element = ElementBytes(InputType());
  const auto* input_bytes = static_cast<const uint8_t*>(input);
  const auto* weight_bytes = static_cast<const uint8_t*>(weights_);
  const bool int8 = storage_ == WeightStorage::kInt8;
  Tile tile;
  if (tiles.split_depth) {
    const Cut& depth = tiles.depth;
    const int64_t first = depth.Begin(task);
    const bool short_last = task == depth.count - 1 && depth.HasShortLast();
    tile.primitive = &pieces->primitives[short_last ? 1 : 0];
    tile.rows = tiles.rows.extent;
    tile.depth = depth.Size(task);
    tile.columns = shape_.out_dim;
    tile.partial = true;
    tile.input = input_bytes + first * element;
    tile.weights = weight_bytes + first * shape_.weight_stride * element;
    tile.output = partial_sums + task * tile.rows * shape_.out_dim;
    if (int8) tile.output_scales = call.output_scales.data();
    return tile;
  }
  const int64_t row_tile = task / tiles.columns.count;
  const int64_t column_tile = task % tiles.columns.count;
  const int64_t first_row = tiles.rows.Begin(row_tile);
  const int64_t first_column = tiles.columns.Begin(column_tile);
  const bool short_last =
      column_tile == tiles.columns.count - 1 && tiles.columns.HasShortLast();
  tile.primitive = &row_tiles_[short_last ? 1 : 0];
  tile.rows = tiles.rows.Size(row_tile);
  tile.depth = shape_.in_dim;
  tile.columns = tiles.columns.Size(column_tile);
  tile.input = input_bytes + first_row * shape_.in_dim * element;
  tile.weights = weight_bytes + first_column * element;
  tile.output = output + first_row * shape_.output_stride + first_column;
  if (bias_) tile.bias = (int8 ? call.scaled_bias.data() : bias_) + first_column;
  if (int8) tile.output_scales = call.output_scales.data() + first_column;
  return tile;
}

void LinearPrimitive::MakeTileMemory(const Tile& tile, size_t scratchpad_bytes,
                                     LinearCall::TileMemory& memory) const {
  memory.rows = -1;  // until every object below is made: any of them may fail
  const memory::data_type type = InputType();
  memory.input =
      dnnl::memory(Matrix(tile.rows, tile.depth, shape_.in_dim, type), engine_, nullptr);
  memory.weights = dnnl::memory(
      Matrix(tile.depth, tile.columns, shape_.weight_stride, type), engine_, nullptr);
  memory.output =
      dnnl::memory(Matrix(tile.rows, tile.columns,
                          tile.partial ? shape_.out_dim : shape_.output_stride),
                   engine_, nullptr);
  memory.bias = dnnl::memory(Matrix(1, tile.columns, tile.columns), engine_, nullptr);
  memory.output_scales = dnnl::memory(
      memory::desc({tile.columns}, memory::data_type::f32, memory::format_tag::a),
      engine_, nullptr);
  memory.scratchpad = dnnl::memory(
      memory::desc({static_cast<memory::dim>(std::max<size_t>(scratchpad_bytes, 1))},
                   memory::data_type::u8, memory::format_tag::a),
      engine_, nullptr);
  memory.depth = tile.depth;
  memory.columns = tile.columns;
  memory.partial = tile.partial;
  memory.scratchpad_bytes = scratchpad_bytes;
  memory.rows = tile.rows;
}

LinearCall::TileMemory& LinearPrimitive::TileMemoryFor(
    const Tile& tile, LinearCall::ThreadMemory& thread_memory) const {
  const size_t scratchpad_bytes = ScratchpadBytes(*tile.primitive);
  for (LinearCall::TileMemory& memory : thread_memory.shapes) {
    if (memory.rows == tile.rows && memory.depth == tile.depth &&
        memory.columns == tile.columns && memory.partial == tile.partial &&
        memory.scratchpad_bytes == scratchpad_bytes) {
      return memory;
    }
  }
  LinearCall::TileMemory& made = thread_memory.shapes[thread_memory.next_victim];
  thread_memory.next_victim = (thread_memory.next_victim + 1) % 4;
  MakeTileMemory(tile, scratchpad_bytes, made);
  return made;
}

// Tasks are claimed by whichever thread is free, so every thread gets the memory
// objects of every tile shape of the call (at most four: whole and short last rows
// and columns, or depth pieces) before any runs: repeated calls then make none.
void LinearPrimitive::PrepareTileMemory(const LinearTiles& tiles, int team,
                                        const void* input, float* output,
                                        LinearCall& call, LinearThreads& threads,
                                        const LinearCall::Pieces* pieces) const {
  const int64_t last = tiles.tasks() - 1;
  const int64_t columns = tiles.split_depth ? 1 : tiles.columns.count;
  for (const int64_t task : {int64_t{0}, columns - 1, last - (columns - 1), last}) {
    const Tile tile =
        MakeTile(tiles, task, input, output, call, threads.partial_sums.data(), pieces);
    for (int thread = 0; thread < team; ++thread) {
      TileMemoryFor(tile, call.thread_memory[thread]);
    }
  }
}

void LinearPrimitive::RunTile(const Tile& tile, LinearCall::ThreadMemory& thread_memory,
                              LinearThreads& threads, int thread) const {
  const size_t scratchpad_bytes = ScratchpadBytes(*tile.primitive);
  LinearCall::TileMemory& memory = TileMemoryFor(tile, thread_memory);
  memory.input.set_data_handle(const_cast<void*>(tile.input));
  memory.weights.set_data_handle(const_cast<void*>(tile.weights));
  memory.output.set_data_handle(tile.output);
  dnnl_exec_arg_t args[6] = {{DNNL_ARG_SRC, memory.input.get()},
                             {DNNL_ARG_WEIGHTS, memory.weights.get()},
                             {DNNL_ARG_DST, memory.output.get()}};
  int count = 3;
  if (scratchpad_bytes > 0) {
    memory.scratchpad.set_data_handle(threads.scratchpads.data() +
                                      thread * threads.scratchpad_stride);
    args[count++] = {DNNL_ARG_SCRATCHPAD, memory.scratchpad.get()};
  }
  if (tile.bias) {
    memory.bias.set_data_handle(const_cast<float*>(tile.bias));
    args[count++] = {DNNL_ARG_BIAS, memory.bias.get()};
  }
  if (tile.output_scales) {
    memory.output_scales.set_data_handle(const_cast<float*>(tile.output_scales));
    args[count++] = {DNNL_ARG_ATTR_OUTPUT_SCALES, memory.output_scales.get()};
  }
  dnnl::stream& stream = threads.streams[thread];
  dnnl::error::wrap_c_api(
      dnnl_primitive_execute(tile.primitive->get(), stream.get(), count, args),
      "mha: oneDNN matmul execution failed");
  stream.wait();
}

}  // namespace mha::internal
