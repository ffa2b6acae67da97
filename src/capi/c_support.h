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

// A copy of a growing argument struct. fields_end lists, per release, where that
// release's last field ends (the last entry: sizeof(Args)); a caller's struct_size
// must be the sizeof of one of them, and the copy holds that release's fields, zeros
// after them. Where two releases share a sizeof the later is read, so the field it
// added over padding must be checked by the caller.
template <class Args, size_t kReleases>
Args VersionedArgs(const Args* args, const size_t (&fields_end)[kReleases]) {
  static_assert(kReleases >= 1, "a struct has a first release");
  Require(args, "args");
  const auto release_size = [](size_t end) {
    return (end + alignof(Args) - 1) / alignof(Args) * alignof(Args);
  };
  size_t copied = 0, last_size = 0;
  std::string sizes;
  for (const size_t end : fields_end) {
    const size_t size = release_size(end);
    if (size == args->struct_size) copied = end;
    if (size != last_size) sizes += (sizes.empty() ? "" : ", ") + std::to_string(size);
    last_size = size;
  }
  if (copied == 0) {
    throw mha::Error("mha: args.struct_size: must be sizeof the struct of a release (" +
                     sizes + "), got " + std::to_string(args->struct_size));
  }
  Args copy;
  std::memset(&copy, 0, sizeof copy);
  std::memcpy(&copy, args, copied);
  return copy;
}

// A struct with one release so far.
template <class Args>
Args VersionedArgs(const Args* args) {
  const size_t fields_end[] = {sizeof(Args)};
  return VersionedArgs(args, fields_end);
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
// The features of a layer or core call of num_heads query heads (c_features.cc).
mha::AttentionFeatures ToFeatures(const mha_features& c, int64_t num_heads);
// The C options with their zeros' defaults (block_size 16, num_layers 1).
mha::PagedKvCacheOptions ToPagedOptions(const mha_paged_kv_cache_options& options);

}  // namespace mha::capi
