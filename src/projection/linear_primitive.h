// LinearPrimitive: one oneDNN matmul y[M, N] = x[M, K] W[K, N] + bias, run as the
// fixed tiles of LinearTiles, each a single-threaded oneDNN call inside mha's own
// parallel loop, so the bits never depend on the thread count. Row tiles use
// primitives with a run-time M made at construction; the depth pieces of
// decode-sized inputs use fixed-shape primitives, made on first use and kept in the
// caller's LinearCall, because a run-time-M call costs about 1.9 us against 0.45 us
// there (measured on this machine). One idea per file: creation
// (linear_primitive.cc), the input in the weights' type (linear_input.cc), the tiled
// execution (linear_tile_execution.cc) and the depth pieces
// (linear_depth_pieces.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"
#include "src/projection/linear_tiles.h"
#include "src/projection/packed_weights.h"

namespace mha::internal {

struct LinearShape {
  int64_t in_dim = 0;         // K
  int64_t out_dim = 0;        // N
  int64_t weight_stride = 0;  // row stride of W[K, N] (>= N: W may be a column slice)
  int64_t output_stride = 0;  // row stride of y (>= N: y may be a column slice)
};

// What a workspace's projections share, per thread of the team that runs them.
struct LinearThreads {
  std::vector<dnnl::stream> streams;
  std::vector<uint8_t> scratchpads;  // oneDNN's, user-managed: one slice per thread
  size_t scratchpad_stride = 0;      // bytes per thread
  std::vector<float> partial_sums;   // depth pieces' outputs, [piece][M][N]
};

// One caller's state for one LinearPrimitive: the depth pieces' primitives for the
// last few row counts, each thread's memory objects for the tile shapes it last
// ran, and the input in the primitive's type.
struct LinearCall {
  struct Pieces {
    int64_t rows = -1;
    dnnl::primitive primitives[2];  // a whole piece, the short last one
  };
  // The memory objects of one thread for one tile shape.
  struct TileMemory {
    int64_t rows = -1, depth = -1, columns = -1;
    bool partial = false;
    size_t scratchpad_bytes = 0;
    dnnl::memory input, weights, bias, output, output_scales, scratchpad;
  };
  // One thread's memory objects for the last few tile shapes it ran (whole tiles
  // and short last ones, of whole calls and of chunks), replaced round-robin.
  struct ThreadMemory {
    TileMemory shapes[4];
    int next_victim = 0;
  };
  static constexpr int kEntries = 4;
  Pieces pieces[kEntries];
  int next_victim = 0;                      // replaced round-robin
  std::vector<ThreadMemory> thread_memory;  // per thread of the team
  std::vector<uint16_t> bf16_input;         // the input rounded to bf16, for bf16 weights
  std::vector<float> float_input;  // a bf16 input widened, for fp32 or int8 weights
  // int8 weights: the quantised input, and per output column the dequantisation
  // scale and the bias divided by it (oneDNN scales the bias with the products).
  std::vector<int8_t> int8_input;
  std::vector<float> output_scales, scaled_bias;
  // A batch-invariant call's input padded to whole row groups, and its output.
  std::vector<uint8_t> padded_input;
  std::vector<float> padded_output;
};

class LinearPrimitive {
 public:
  LinearPrimitive() = default;
  // `weights` (of `storage`), their int8 column `scales` and `bias` (float, null:
  // none) must outlive the primitive. With bf16 weights the input is rounded to bf16
  // and the products accumulate in fp32. With int8 weights the input is quantised
  // per call (symmetric, one scale for the whole input, as PyTorch's
  // quantize_dynamic and ONNX Runtime's DynamicQuantizeMatMul do), the products
  // accumulate in int32, and oneDNN dequantises them as it writes the output.
  LinearPrimitive(const dnnl::engine& engine, const LinearShape& shape,
                  const void* weights, const float* bias, WeightStorage storage,
                  const float* scales);

  // Whether oneDNN can multiply bf16 matrices on this CPU (it cannot without AVX-512).
  static bool Bf16Supported(const dnnl::engine& engine);

  // The largest |q| int8 weights may hold here: 127 with VNNI; 63 without, where
  // oneDNN multiplies through vpmaddubsw, whose 16-bit pair sums saturate beyond
  // that (PyTorch's reduce_range does the same).
  static int Int8WeightLevels();

  // `input` holds rows x in_dim floats, or bfloat16 bits when input_bf16.
  void Execute(const void* input, bool input_bf16, int64_t rows, TileRule rule,
               float* output, LinearCall& call, LinearThreads& threads) const;

 private:
  struct Tile;
  // Execute, with oneDNN's out-of-memory errors left untranslated.
  void Run(const void* input, bool input_bf16, int64_t rows, TileRule rule, float* output,
           LinearCall& call, LinearThreads& threads) const;
  // A batch-invariant call of rows that are not whole row groups.
  void RunPadded(const void* input, bool input_bf16, int64_t rows, float* output,
                 LinearCall& call, LinearThreads& threads) const;
  // A matmul that runs single-threaded wherever it is executed.
  dnnl::matmul MakeMatmul(dnnl::memory::dim rows, int64_t depth, int64_t columns,
                          bool partial) const;
  dnnl::matmul::primitive_desc Describe(dnnl::memory::dim rows, int64_t depth,
                                        int64_t columns, bool partial) const;
  const LinearCall::Pieces& PreparePieces(LinearCall& call,
                                          const LinearTiles& tiles) const;
  // Streams, scratchpad slices, memory slots and partial sums for `team` threads.
  void PrepareThreads(int team, const LinearTiles& tiles,
                      const LinearCall::Pieces* pieces, LinearCall& call,
                      LinearThreads& threads) const;
  Tile MakeTile(const LinearTiles& tiles, int64_t task, const void* input, float* output,
                const LinearCall& call, float* partial_sums,
                const LinearCall::Pieces* pieces) const;
  void MakeTileMemory(const Tile& tile, size_t scratchpad_bytes,
                      LinearCall::TileMemory& memory) const;
  // This thread's memory objects for the tile's shape, made if it has none.
  LinearCall::TileMemory& TileMemoryFor(const Tile& tile,
                                        LinearCall::ThreadMemory& thread_memory) const;
  void PrepareTileMemory(const LinearTiles& tiles, int team, const void* input,
                         float* output, LinearCall& call, LinearThreads& threads,
                         const LinearCall::Pieces* pieces) const;
  void RunTile(const Tile& tile, LinearCall::ThreadMemory& memory, LinearThreads& threads,
               int thread) const;
  void AddPartialSums(const LinearTiles& tiles, const float* partial_sums,
                      float* output) const;
  dnnl::memory::data_type InputType() const;
  // The input in the primitive's type: converted, or quantised into `call`.
  const void* PrepareInput(const void* input, bool input_bf16, int64_t rows,
                           LinearCall& call) const;

  LinearShape shape_;
  WeightStorage storage_ = WeightStorage::kFloat32;
  const void* weights_ = nullptr;
  const float* scales_ = nullptr;
  const float* bias_ = nullptr;
  dnnl::engine engine_;
  Cut columns_;                           // the row tiles' column cut
  dnnl::matmul row_tiles_[2];             // run-time M; whole and short last columns
  size_t row_tile_scratchpad_bytes_ = 0;  // the larger of the two
};

}  // namespace mha::internal
