/* A C program linked with `pkg-config --cflags --libs mha`, and from a C-only CMake
   project (../cmake_c_consumer). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mha/mha.h"

int main(void) {
  enum { E = 8, S = 3 };
  static float w[E * E], x[S * E], out[S * E];
  for (int i = 0; i < E * E; ++i) w[i] = 0.01f * (float)(i % 7);
  for (int i = 0; i < S * E; ++i) x[i] = sinf((float)i);
  mha_config config;
  memset(&config, 0, sizeof config);
  config.num_heads = 2;
  config.head_dim = E / 2;
  config.query_dim = E;
  mha_weights weights;
  memset(&weights, 0, sizeof(weights));
  weights.query.weight = weights.key.weight = weights.value.weight = w;
  mha_layer* layer = NULL;
  mha_layer_create_args create;
  memset(&create, 0, sizeof(create));
  create.struct_size = sizeof(create);
  create.config = &config;
  create.weights = &weights;
  if (mha_layer_create_ex(&create, &layer) != MHA_OK) {
    printf("create failed: %s\n", mha_last_error());
    return 1;
  }
  mha_forward_args args;
  memset(&args, 0, sizeof(args));
  args.batch = 1;
  args.query_len = args.key_len = S;
  args.query = x;
  args.output = out;
  const int ok = mha_forward(layer, &args) == MHA_OK && isfinite(out[0]);
  mha_layer_destroy(layer);
  printf("pkg-config consumer: %s, out[0] = %f\n", ok ? "ok" : "FAILED", out[0]);
  return ok ? 0 : 1;
}
