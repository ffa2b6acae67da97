// LinearPrimitive on oneDNN 2.6's matmul (v2 desc API), executed through the C API
// with a fixed argument array: the C++ API builds a map per call.
#include "src/projection/linear_primitive.h"

#include <omp.h>

#include <exception>

#include "src/kernels/bf16_convert.h"
#include "src/kernels/int8_quantize.h"
#include "src/platform/isa_cap.h"
#include "src/platform/onednn_errors.h"
#include "src/threading/parallel_for.h"

namespace mha::internal {
namespace {

using dnnl::memory;

memory::desc Matrix(memory::dim rows, memory::dim cols, memory::dim stride,
                    memory::data_type type = memory::data_type::f32) {
  return memory::desc({rows, cols}, type, {stride, 1});
}

size_t ElementBytes(memory::data_type type) {
  return type == memory::data_type::s8 ? 1 : type == memory::data_type::bf16 ? 2 : 4;
}

size_t ScratchpadBytes(const dnnl::primitive& primitive) {
  const_dnnl_primitive_desc_t pd = nullptr;
  dnnl::error::wrap_c_api(dnnl_primitive_get_primitive_desc(primitive.get(), &pd),
                          "mha: oneDNN primitive query failed");
  return dnnl_memory_desc_get_size(
      dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
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
#pragma omp parallel num_threads(team)
    {
      omp_set_num_threads(1);  // even if the runtime granted a team of one
#pragma omp for schedule(static)
      for (int64_t task = 0; task < count; ++task) guarded(task, omp_get_thread_num());
    }
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

bool LinearPrimitive::Bf16Supported(const dnnl::engine& engine) {
  try {
    const memory::desc bf16 = Matrix(16, 16, 16, memory::data_type::bf16);
    TranslateOneDnnErrors([&] {
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(bf16, bf16, Matrix(16, 16, 16)),
                                   engine);
    });
    return true;
  } catch (const dnnl::error&) {  // unimplemented; out of memory is bad_alloc
    return false;
  }
}

int LinearPrimitive::Int8WeightLevels() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto vnni = [&](dnnl::cpu_isa with) {
    const auto bits = static_cast<unsigned>(with);
    return (isa & bits) == bits;
  };
  return vnni(dnnl::cpu_isa::avx512_core_vnni) || vnni(dnnl::cpu_isa::avx2_vnni) ? 127
                                                                                 : 63;
}

LinearPrimitive::LinearPrimitive(const dnnl::engine& engine, const LinearShape& shape,
                                 const void* weights, const float* bias,
                                 WeightStorage storage, const float* scales)
    : shape_(shape),
      storage_(storage),
      weights_(weights),
      scales_(scales),
      bias_(bias),
      engine_(engine),
      columns_(
          PlanLinearTiles(kSplitDepthRows + 1, shape.in_dim, shape.out_dim).columns) {
  TranslateOneDnnErrors([&] {
    for (int slot = 0; slot < (columns_.HasShortLast() ? 2 : 1); ++slot) {
      const int64_t columns = slot ? columns_.Size(columns_.count - 1) : columns_.size;
      row_tiles_[slot] = MakeMatmul(DNNL_RUNTIME_DIM_VAL, shape.in_dim, columns, false);
      row_tile_scratchpad_bytes_ =
          std::max(row_tile_scratchpad_bytes_, ScratchpadBytes(row_tiles_[slot]));
    }
  });
}

memory::data_type LinearPrimitive::InputType() const {
  switch (storage_) {
    case WeightStorage::kBFloat16:
      return memory::data_type::bf16;
    case WeightStorage::kInt8:
      return memory::data_type::s8;
    case WeightStorage::kFloat32:
      break;
  }
  return memory::data_type::f32;
}

dnnl::matmul LinearPrimitive::MakeMatmul(memory::dim rows, int64_t depth, int64_t columns,
                                         bool partial) const {
  // oneDNN 2.6 keeps the thread count it sees at creation and forks that many
  // threads at execution unless called inside a parallel region.
  const ScopedThreadCount single(1);
  dnnl::matmul::primitive_desc pd(Describe(rows, depth, columns, partial));
  return dnnl::matmul(pd);
}

dnnl::matmul::primitive_desc LinearPrimitive::Describe(memory::dim rows, int64_t depth,
                                                       int64_t columns,
                                                       bool partial) const {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // Per output column, given at execution: input scale x weight column scale.
  if (storage_ == WeightStorage::kInt8) attr.set_output_scales(2, {DNNL_RUNTIME_F32_VAL});
  const memory::desc bias =
      bias_ && !partial ? Matrix(1, columns, columns) : memory::desc();
  dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(
          Matrix(rows, depth, shape_.in_dim, InputType()),
          Matrix(depth, columns, shape_.weight_stride, InputType()), bias,
          Matrix(rows, columns, partial ? shape_.out_dim : shape_.output_stride)),
      attr, engine_);
  RecordProjectionKernel(pd.impl_info_str());
  return pd;
}

const LinearCall::Pieces& LinearPrimitive::PreparePieces(LinearCall& call,
                                                         const LinearTiles& tiles) const {
  const int64_t rows = tiles.rows.extent;
  for (const LinearCall::Pieces& pieces : call.pieces) {
    if (pieces.rows == rows) return pieces;
  }
  LinearCall::Pieces& pieces = call.pieces[call.next_victim];
  call.next_victim = (call.next_victim + 1) % LinearCall::kEntries;
  pieces.rows = -1;  // until both primitives are made: either may fail
  const Cut& depth = tiles.depth;
  pieces.primitives[0] = MakeMatmul(rows, depth.size, shape_.out_dim, true);
  if (depth.HasShortLast()) {
    pieces.primitives[1] =
        MakeMatmul(rows, depth.Size(depth.count - 1), shape_.out_dim, true);
  }
  pieces.rows = rows;
  return pieces;
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

void LinearPrimitive::RunTile(const Tile& tile, LinearCall::ThreadMemory& thread_memory,
                              LinearThreads& threads, int thread) const {
  const size_t scratchpad_bytes = ScratchpadBytes(*tile.primitive);
  const auto fits = [&](const LinearCall::TileMemory& memory) {
    return memory.rows == tile.rows && memory.depth == tile.depth &&
           memory.columns == tile.columns && memory.partial == tile.partial &&
           memory.scratchpad_bytes == scratchpad_bytes;
  };
  LinearCall::TileMemory* found = nullptr;
  for (LinearCall::TileMemory& memory : thread_memory.shapes) {
    if (fits(memory)) found = &memory;
  }
  if (!found) {
    found = &thread_memory.shapes[thread_memory.next_victim];
    thread_memory.next_victim = (thread_memory.next_victim + 1) % 4;
    MakeTileMemory(tile, scratchpad_bytes, *found);
  }
  LinearCall::TileMemory& memory = *found;
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

void LinearPrimitive::AddPartialSums(const LinearTiles& tiles, const float* partial_sums,
                                     float* output) const {
  const int64_t rows = tiles.rows.extent, columns = shape_.out_dim;
  const int64_t piece_floats = rows * columns;
  constexpr int64_t kSlice = 512;  // columns per task
  const int64_t slices = (columns + kSlice - 1) / kSlice;
  ParallelFor(rows * slices, nullptr, 0, [&](int64_t task, float*) {
    const int64_t row = task / slices, first = task % slices * kSlice;
    const int64_t last = std::min(columns, first + kSlice);
    const float* sums = partial_sums + row * columns;
    float* out = output + row * shape_.output_stride;
    for (int64_t n = first; n < last; ++n) {
      float sum = sums[n];
      for (int64_t piece = 1; piece < tiles.depth.count; ++piece)
        sum += sums[piece * piece_floats + n];
      out[n] = bias_ ? sum + bias_[n] : sum;
    }
  });
}

const void* LinearPrimitive::PrepareInput(const void* input, bool input_bf16,
                                          int64_t rows, LinearCall& call) const {
  const size_t count = static_cast<size_t>(rows * shape_.in_dim);
  if (input_bf16 && storage_ != WeightStorage::kBFloat16) {
    if (call.float_input.size() < count) call.float_input.resize(count);
    Bf16ToFloat(static_cast<const uint16_t*>(input), count, call.float_input.data());
    input = call.float_input.data();
  }
  if (storage_ == WeightStorage::kBFloat16 && !input_bf16) {
    if (call.bf16_input.size() < count) call.bf16_input.resize(count);
    FloatToBf16(static_cast<const float*>(input), count, call.bf16_input.data());
    return call.bf16_input.data();
  }
  if (storage_ != WeightStorage::kInt8) return input;
  const float* values = static_cast<const float*>(input);
  const float max_abs = MaxAbs(values, count);
  // An all-zero input quantises to zeros whatever the scale: keep 1.
  const float scale = max_abs > 0.0f ? max_abs / 127.0f : 1.0f;
  if (call.int8_input.size() < count) call.int8_input.resize(count);
  QuantizeInt8(values, count, 1.0f / scale, call.int8_input.data());
  const size_t columns = static_cast<size_t>(shape_.out_dim);
  call.output_scales.resize(columns);
  call.scaled_bias.resize(bias_ ? columns : 0);
  for (size_t n = 0; n < columns; ++n) {
    call.output_scales[n] = scale * scales_[n];
    if (bias_) call.scaled_bias[n] = bias_[n] / call.output_scales[n];
  }
  return call.int8_input.data();
}

void LinearPrimitive::Execute(const void* input, bool input_bf16, int64_t rows,
                              float* output, LinearCall& call,
                              LinearThreads& threads) const {
  TranslateOneDnnErrors([&] { Run(input, input_bf16, rows, output, call, threads); });
}

void LinearPrimitive::Run(const void* input, bool input_bf16, int64_t rows, float* output,
                          LinearCall& call, LinearThreads& threads) const {
  const LinearTiles tiles = PlanLinearTiles(rows, shape_.in_dim, shape_.out_dim);
  const LinearCall::Pieces* pieces =
      tiles.split_depth ? &PreparePieces(call, tiles) : nullptr;
  const int team = TeamSize();
  PrepareThreads(team, tiles, pieces, call, threads);
  const void* typed_input = PrepareInput(input, input_bf16, rows, call);
  RunSingleThreadedTasks(tiles.tasks(), team, [&](int64_t task, int thread) {
    const Tile tile = MakeTile(tiles, task, typed_input, output, call,
                               threads.partial_sums.data(), pieces);
    RunTile(tile, call.thread_memory[thread], threads, thread);
  });
  if (tiles.split_depth) AddPartialSums(tiles, threads.partial_sums.data(), output);
}

}  // namespace mha::internal
