// The rotary-embedding flags, one parser for every tool that builds a layer
// (mha-run, mha-tensor-parallel): --rope, --rope-theta, --rotary-dim,
// --rope-scaling, --rope-max-positions and --longrope-factors.
#pragma once

#include <set>
#include <string>

#include "mha/rotary.hpp"

namespace mha::cli {

// Whether `flag` is one ParseRotaryFlag takes.
bool IsRotaryFlag(const std::string& flag);

// Parses `flag`'s value into `rotary` if it is a rotary flag that takes one (not
// --longrope-factors, a file); false for any other flag.
bool ParseRotaryFlag(const std::string& flag, const std::string& value,
                     RotaryConfig& rotary);

// Refuses a rotary flag given without --rope (a UsageError naming it).
void CheckRotaryFlagsApply(const std::set<std::string>& given);

// LongRoPE's factors from a float32 [2, rotary_dim / 2] .npy (short, then long).
void LoadLongRopeFactors(const std::string& path, RotaryConfig& rotary);

// The flags' usage lines.
extern const char kRotaryFlagsUsage[];

}  // namespace mha::cli
