// Umbrella header for the mha C++ API.
#pragma once

#include "mha/attention.hpp"
#include "mha/config.hpp"
#include "mha/error.hpp"
#include "mha/head_shard.hpp"
#include "mha/isa.hpp"
#include "mha/latent_attention.hpp"
#include "mha/layer_file.hpp"
#include "mha/masks.hpp"
#include "mha/packed_step.hpp"
#include "mha/reference.hpp"
#include "mha/rotary.hpp"
#include "mha/scaled_dot_product_attention.hpp"
#include "mha/tensor.hpp"
#include "mha/threads.hpp"
#include "mha/weights.hpp"
