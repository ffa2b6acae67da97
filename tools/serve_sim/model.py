"""An attention-only decoder with random weights: token embeddings, num_layers
pre-norm residual attention layers (mha.MultiheadAttention, Llama 3 8B's attention
shape by default) and a small unembedding whose noisy argmax picks the next token.
Every operation treats rows one at a time, so a token's rows never depend on the
tokens beside it in a step (mha's batch_invariant projections, numpy per row)."""
import numpy as np

import mha


def rms_norm(x):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5)


class AttentionModel:
    def __init__(self, num_layers, hidden, heads, kv_heads, vocab, seed,
                 weight_dtype=mha.DType.float32, num_threads=0, batch_invariant=True):
        rng = np.random.default_rng(seed)
        head_dim = hidden // heads
        config = mha.AttentionConfig(
            num_heads=heads, head_dim=head_dim, query_dim=hidden, num_kv_heads=kv_heads,
            weight_dtype=weight_dtype,
            rotary=mha.RotaryConfig(pairing=mha.RotaryPairing.half_split, theta=5e5,
                                    max_positions=8192))

        def weight(rows, columns):
            return (rng.standard_normal((rows, columns)) / np.sqrt(columns)).astype(
                np.float32)

        self.layers = [
            mha.MultiheadAttention(config, weight(hidden, hidden),
                                   weight(kv_heads * head_dim, hidden),
                                   weight(kv_heads * head_dim, hidden),
                                   weight(hidden, hidden))
            for _ in range(num_layers)]
        self.embedding = rng.standard_normal((vocab, hidden)).astype(np.float32)
        self.unembedding = weight(vocab, hidden).T.copy()  # [hidden, vocab]
        self.vocab, self.num_threads = vocab, num_threads
        self.batch_invariant = batch_invariant  # False only to show what it buys

    def packed_step(self, cache, sequence_ids, query_start_loc, tokens):
        """One packed step through every layer (slots already appended): the last
        layer's output rows [T, hidden]."""
        x = self.embedding[tokens]
        for index, layer in enumerate(self.layers):
            x = x + layer.forward_packed(rms_norm(x), sequence_ids, query_start_loc,
                                         cache, index,
                                         batch_invariant=self.batch_invariant,
                                         num_threads=self.num_threads)
        return x

    def next_token(self, row, seed, position):
        """argmax of the logits plus Gumbel noise fixed by (seed, position): sampling
        that gives a continuation its own tokens and is the same alone or batched."""
        logits = row @ self.unembedding
        noise = np.random.default_rng([seed, position]).gumbel(size=self.vocab)
        return int(np.argmax(logits + noise.astype(np.float32)))

    def alone(self, request, digest, storage=mha.DType.float32):
        """The request run alone through contiguous caches (mha.KvCache per layer, of
        `storage`):
        its prompt in one call, then one token per step. Feeds the output rows to
        `digest` and returns the tokens it generates."""
        length = len(request.prompt) + request.max_tokens
        caches = [mha.KvCache(layer, 1, length, storage) for layer in self.layers]
        tokens, generated = list(request.prompt), []
        chunk = np.array(tokens)
        while len(generated) < request.max_tokens:
            x = self.embedding[chunk][None]
            for layer, cache in zip(self.layers, caches):
                x = x + layer.forward_with_cache(rms_norm(x), cache, batch_invariant=True,
                                                 num_threads=self.num_threads)
            digest.update(x[0].tobytes())
            token = self.next_token(x[0, -1], request.seed, len(tokens))
            generated.append(token)
            tokens.append(token)
            chunk = np.array([token])
        return generated
