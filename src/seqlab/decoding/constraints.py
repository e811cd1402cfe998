"""Lexical constraints: how far a hypothesis has come through the token sequences it must contain.

fairseq's `--constraints` (fairseq.token_generation_constraints) in two forms, with its exact semantics:

- `ordered`: the constraints appear in the order given, any tokens between them (one linear state);
- `unordered`: in any order, tracked on a trie of the constraints (the same sequence given twice must
  appear twice).

A state is immutable: `advance(token)` returns the next one. What beam search reads from a state:
`bank` (constraint tokens met so far, the beam's allocation key: Hu et al. 2019), `finished` (every
constraint met: only then may the hypothesis end), `next_tokens()` (the tokens that would make progress,
added to the candidates of every step) and `tokens` (the distinct constraint tokens).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Literal

from seqlab.config import ConfigError

ConstraintOrder = Literal["ordered", "unordered"]


def check_constraints(constraints: Sequence[Sequence[int]], where: str, limit: int) -> None:
    """Fail, naming `where` (the source), on an empty constraint (a sequence needs a token at least) and on
    constraints that cannot fit the source's length limit (`limit` tokens, EOS included)."""
    for i, c in enumerate(constraints):
        if len(c) == 0:
            raise ConfigError(f"constraint {i} of {where} is empty (it tokenized to nothing): drop it or give "
                              "a word the tokenizer keeps")
    need = sum(len(c) for c in constraints)
    if need >= limit:
        raise ConfigError(f"the constraints of {where} have {need} tokens, but its length limit is {limit} (EOS "
                          "included): drop constraints or raise decoding.max_length / max_len_b")


class Node:
    """A trie node of unordered constraints: the token that leads to it, how many constraints end here
    (`terminal`) and how many end here or below (`num_constraints`)."""

    __slots__ = ("token", "parent", "children", "terminal", "num_constraints")

    def __init__(self, token: int | None = None, parent: Node | None = None) -> None:
        self.token, self.parent = token, parent
        self.children: dict[int, Node] = {}
        self.terminal = 0
        self.num_constraints = 0

    @classmethod
    def trie(cls, constraints: Sequence[Sequence[int]]) -> Node:
        root = cls()
        for sequence in constraints:
            node = root
            for token in sequence:
                node = node.children.setdefault(int(token), cls(int(token), node))
            node.terminal += 1
            while node is not None:
                node.num_constraints += 1
                node = node.parent
        return root

    def token_counts(self) -> Counter:
        """How many constraints pass through each token's nodes, summed per token (below this node)."""
        counts: Counter = Counter()
        stack = list(self.children.values())
        while stack:
            node = stack.pop()
            counts[node.token] += node.num_constraints
            stack.extend(node.children.values())
        return counts


class UnorderedState:
    """Progress through unordered constraints: the trie node reached, how often each node was generated
    on the way to unfinished constraints, and how often each terminal node was completed."""

    __slots__ = ("node", "root", "generated", "completed", "tokens")

    def __init__(self, node: Node, root: Node, generated: dict[Node, int], completed: dict[Node, int],
                 tokens: frozenset) -> None:
        self.node, self.root, self.generated, self.completed, self.tokens = node, root, generated, completed, tokens

    @classmethod
    def start(cls, constraints: Sequence[Sequence[int]]) -> UnorderedState:
        root = Node.trie(constraints)
        return cls(root, root, {}, {}, frozenset(root.token_counts()))

    def _at(self, node: Node) -> UnorderedState:
        """A copy of this state moved to `node` (which counts as generated once more, unless the root).
        Plain dicts, not Counters: a search copies two per candidate and step."""
        state = UnorderedState(node, self.root, dict(self.generated), dict(self.completed), self.tokens)
        if node is not self.root:
            state.generated[node] = state.generated.get(node, 0) + 1
        return state

    @property
    def is_root(self) -> bool:
        return self.node is self.root

    @property
    def bank(self) -> int:
        return sum(self.generated.values())

    @property
    def num_completed(self) -> int:
        """Constraints met, the one ending at the current node included (it is met unless a later token
        continues a longer constraint through it, and then it still counts when the state falls back)."""
        here = bool(self.node.terminal) and self.completed.get(self.node, 0) < self.node.terminal
        return sum(self.completed.values()) + here

    @property
    def finished(self) -> bool:
        return self.root.num_constraints == self.num_completed

    def next_tokens(self) -> set[int]:
        """The tokens that start a constraint, and those that continue the current one."""
        if self.is_root:
            return set(self.root.children)
        return set(self.root.children) | set(self.node.children)

    def advance(self, token: int) -> UnorderedState:
        """Move down the trie where `token` continues an unsaturated path (one whose constraints are not all
        generated already); else fall back to the root, counting the deepest unmet constraint that ends on
        the way up as completed (or un-generating the nodes passed), and try `token` from the root."""
        token = int(token)
        child = self.node.children.get(token)
        if child is not None and self.generated.get(child, 0) < child.num_constraints:
            return self._at(child)
        start = self.root.children.get(token)
        if start is not None and self.generated.get(start, 0) < start.num_constraints:
            state = self._at(start)
        else:
            state = self._at(self.root)
        node = self.node
        while node is not self.root:
            if node.terminal and self.completed.get(node, 0) < node.terminal:
                state.completed[node] = state.completed.get(node, 0) + 1
                break
            state.generated[node] = state.generated.get(node, 0) - 1
            node = node.parent
        return state


class OrderedState:
    """Progress through ordered constraints, concatenated: the index of the last constraint token met
    (-1: none). Between constraints any tokens are allowed; inside one, a wrong token starts over."""

    __slots__ = ("tokens_seq", "ends", "state", "tokens")

    def __init__(self, tokens_seq: tuple[int, ...], ends: tuple[bool, ...], state: int, tokens: frozenset) -> None:
        self.tokens_seq, self.ends, self.state, self.tokens = tokens_seq, ends, state, tokens

    @classmethod
    def start(cls, constraints: Sequence[Sequence[int]]) -> OrderedState:
        seq = tuple(int(t) for c in constraints for t in c)
        ends = tuple(i == len(c) - 1 for c in constraints for i in range(len(c)))
        return cls(seq, ends, -1, frozenset(seq))

    def _to(self, state: int) -> OrderedState:
        return OrderedState(self.tokens_seq, self.ends, state, self.tokens)

    @property
    def is_root(self) -> bool:
        return self.state == -1

    @property
    def bank(self) -> int:
        return self.state + 1

    @property
    def num_completed(self) -> int:
        return sum(self.ends[: self.state + 1])

    @property
    def finished(self) -> bool:
        return self.state + 1 == len(self.tokens_seq)

    def next_tokens(self) -> set[int]:
        """The next constraint token, and (past the first token; fairseq's rule) the first one again."""
        out = set()
        if self.state > 0:
            out.add(self.tokens_seq[0])
        if not self.finished:
            out.add(self.tokens_seq[self.state + 1])
        return out

    def advance(self, token: int) -> OrderedState:
        token = int(token)
        if self.finished:
            return self
        if self.tokens_seq[self.state + 1] == token:
            return self._to(self.state + 1)
        if self.state >= 0 and self.ends[self.state]:  # between two constraints: anything goes
            return self
        return self._to(0 if token == self.tokens_seq[0] else -1)


ConstraintState = OrderedState | UnorderedState


def start_state(constraints: Sequence[Sequence[int]], order: ConstraintOrder) -> ConstraintState:
    """The state of a hypothesis that has generated nothing yet."""
    return OrderedState.start(constraints) if order == "ordered" else UnorderedState.start(constraints)
