"""Continuous batching over one mha.PagedKvCache: each step packs one token of every
decoding request and prefill chunks of others, up to a token budget. Requests are
admitted in arrival order while blocks last; when append_slots runs out of blocks,
the newest running request is preempted (its blocks freed, its prompt and generated
tokens recomputed later). Admission keeps `watermark` blocks free for the running
requests' next tokens, which makes preemptions rarer. A request with samples > 1 forks
its continuations from the prompt's blocks once its prefill ends."""
import collections
import copy
import hashlib

import numpy as np

import mha


class Running:
    """A request's place in the cache: its tokens and how many the cache holds."""

    def __init__(self, request, hashed):
        self.request = request
        self.tokens = list(request.prompt) + request.generated
        self.computed = 0
        self.hashed = hashed   # rows before this were hashed before a preemption
        self.slot = -1         # its sequence id in the cache while it runs


class Scheduler:
    def __init__(self, model, cache, block_size, max_batched_tokens, max_running,
                 watermark=0):
        self.model, self.cache, self.block_size = model, cache, block_size
        self.watermark = watermark
        self.max_batched_tokens, self.max_running = max_batched_tokens, max_running
        self.waiting = collections.deque()   # Running entries, front first
        self.running = []                    # in admission order: newest last
        self.finished = []
        self.free_slots = list(range(max_running - 1, -1, -1))
        self.next_child_id = None   # set by add: after every request id
        self.preemptions = self.forks = 0

    def add(self, request):
        request.digest = hashlib.blake2b()
        self.next_child_id = max(self.next_child_id or 0, request.id + 1)
        self.waiting.append(Running(request, 0))

    def busy(self):
        return bool(self.waiting or self.running)

    def _blocks(self, tokens):
        return -(-tokens // self.block_size)

    def _admit(self, budget):
        """Admits waiting requests while sequences, blocks and the budget allow."""
        free = self.cache.stats()["free_blocks"]
        # Slots the running prompts will fork into once their prefill ends.
        reserved = sum(self._width(e) - 1 for e in self.running)
        while self.waiting and budget > 0:
            entry = self.waiting[0]
            width = self._width(entry)
            chunk = min(len(entry.tokens), budget)
            if len(self.running) + reserved + width > self.max_running or \
                    self._blocks(chunk) + self.watermark > free:
                break
            self.waiting.popleft()
            entry.slot = self.free_slots.pop()
            self.cache.add_sequence(entry.slot)
            self.running.append(entry)
            free -= self._blocks(chunk)
            budget -= chunk
            reserved += width - 1

    @staticmethod
    def _width(entry):
        """Sequences an entry will run as: a prompt not yet forked, its samples."""
        request = entry.request
        return request.samples if request.parent < 0 and not request.generated else 1

    def _plan(self):
        """(entry, count) for this step: decodes and running prefills first."""
        budget = self.max_batched_tokens
        plan = []
        for entry in self.running:
            count = min(len(entry.tokens) - entry.computed, budget)
            if count > 0:
                plan.append((entry, count))
                budget -= count
        before = len(self.running)
        self._admit(budget)
        for entry in self.running[before:]:
            count = min(len(entry.tokens), budget)
            plan.append((entry, count))
            budget -= count
        return plan

    def _preempt(self, victim):
        self._release(victim)
        victim.request.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(Running(victim.request, max(victim.hashed, victim.computed)))

    def _append(self, plan):
        """append_slots for the plan, preempting the newest request while the pool
        is short; returns what is left of the plan."""
        while plan:
            try:
                self.cache.append_slots([e.slot for e, _ in plan],
                                        [n for _, n in plan])
                return plan
            except mha.OutOfBlocksError:
                victim = self.running[-1]
                self._preempt(victim)
                plan = [(e, n) for e, n in plan if e is not victim]
        return plan

    def step(self):
        """Runs one packed step: what ran ([(entry, count)]), the last layer's rows
        and each entry's first row (query_start_loc)."""
        plan = self._append(self._plan())
        if not plan:
            return [], None, None
        ids = np.array([e.slot for e, _ in plan], np.int64)
        starts = np.concatenate([[0], np.cumsum([n for _, n in plan])]).astype(np.int64)
        tokens = np.concatenate([e.tokens[e.computed:e.computed + n] for e, n in plan])
        return plan, self.model.packed_step(self.cache, ids, starts, tokens), starts

    def finish_step(self, plan, rows, starts, clock):
        """Hashes the rows, samples where a request's tokens are all in the cache,
        forks continuations and retires finished requests."""
        for i, (entry, count) in enumerate(plan):
            request = entry.request
            first = entry.computed
            skip = max(0, min(count, entry.hashed - first))
            request.digest.update(rows[starts[i] + skip:starts[i + 1]].tobytes())
            entry.computed += count
            if entry.computed < len(entry.tokens):
                continue
            last = rows[starts[i + 1] - 1]
            if request.samples > 1 and request.parent < 0 and not request.generated:
                self._fork(entry, last, clock)
            self._sample(entry, last, clock)
        for entry in [e for e in self.running if len(e.request.generated) >=
                      e.request.max_tokens]:
            self._release(entry)
            self.finished.append(entry.request)

    def _release(self, entry):
        self.cache.remove_sequence(entry.slot)
        self.running.remove(entry)
        self.free_slots.append(entry.slot)

    def _sample(self, entry, row, clock):
        request = entry.request
        token = self.model.next_token(row, request.seed, len(entry.tokens))
        request.generated.append(token)
        request.token_times.append(clock)
        entry.tokens.append(token)

    def _fork(self, entry, row, clock):
        """Continuations 2..samples share the prompt's blocks (cache.fork)."""
        parent = entry.request
        for sample in range(1, parent.samples):
            child = copy.copy(parent)
            child.id, child.parent = self.next_child_id, parent.id
            child.seed = parent.seed + sample
            child.generated, child.token_times = [], []
            child.digest = parent.digest.copy()
            self.next_child_id += 1
            forked = Running(child, entry.computed)
            forked.computed = entry.computed
            forked.slot = self.free_slots.pop()
            self.cache.fork(entry.slot, forked.slot)
            self.running.append(forked)
            self._sample(forked, row, clock)
            self.forks += 1
