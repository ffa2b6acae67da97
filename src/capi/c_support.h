// What every C entry point shares: Guard turns exceptions into a status and a
// thread-local message, Require refuses NULL, VersionedArgs reads a growing argument
// struct, and the conversions of C enums and configs to the C++ API's.
#pragma once

#include <cstddef>
#include <cstring>
#include <new>
#include <string>

#include "mha/mha.h"
#include "mha/mha.hpp"

// A paged cache handle: of MultiheadAttention or of multi-head latent attention
// layers (its own create call each), the same mha_paged_kv_cache_* calls for both.
struct mha_paged_kv_cache {
  mha::PagedKvCache cache;
};

namespace mha::capi {

// The message of the last failure on this thread (a fixed buffer: recording an
// error must not allocate, or running out of memory would throw again).
const char* LastError();
void SetLastError(const char* prefix, const char* message) noexcept;

template <class F>
mha_status Guard(const F& body) noexcept {
  try {
    body();
    return MHA_OK;
  } catch (const mha::OutOfBlocksError& e) {
    SetLastError("", e.what());
    return MHA_OUT_OF_BLOCKS;
  } catch (const mha::Error& e) {
    SetLastError("", e.what());
    return MHA_INVALID_ARGUMENT;
  } catch (const std::bad_alloc&) {
    SetLastError("", "mha: out of memory");
    return MHA_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    SetLastError("mha: internal error: ", e.what());
    return MHA_INTERNAL_ERROR;
  } catch (...) {
    SetLastError("", "mha: internal error");
    return MHA_INTERNAL_ERROR;
  }
}

void Require(const void* pointer, const char* name);

// A copy of a growing argument struct: the fields the caller's struct_size covers,
// zeros after them. first_release: the struct's size in its first release.
template <class Args>
Args VersionedArgs(const Args* args, size_t first_release = sizeof(Args)) {
  Require(args, "args");
  if (args->struct_size < first_release || args->struct_size > sizeof(Args)) {
    throw mha::Error("mha: args.struct_size: must be in [" +
                     std::to_string(first_release) + ", " + std::to_string(sizeof(Args)) +
                     "] (sizeof the struct), got " + std::to_string(args->struct_size));
  }
  Args copy;
  std::memset(&copy, 0, sizeof copy);
  std::memcpy(&copy, args, args->struct_size);
  return copy;
}

// The integer a C caller stored in an enum: read as bytes, because loading a value
// outside the enumerators through the enum type is undefined behaviour in C++.
template <class Enum>
int EnumValue(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized here");
  int value = 0;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

[[noreturn]] void UnknownValue(const std::string& name, int value);
// A C storage kind as the C++ caches take it: a dtype and its scales.
struct CacheStorage {
  mha::DType dtype;
  mha::KvScales scales;
};
CacheStorage ToStorage(const mha_kv_storage& storage);
// head_dim: what rotary_dim 0 stands for (the length inv_freq is read to).
mha::RotaryConfig ToRotary(const mha_rope_config& c, int64_t head_dim);
// The C options with their zeros' defaults (block_size 16, num_layers 1).
mha::PagedKvCacheOptions ToPagedOptions(const mha_paged_kv_cache_options& options);

}  // namespace mha::capi
