// check(): the static analysis of a Grammar (undefined rules, rules that never finish, left
// recursion). Every pass is a worklist or an explicit stack, linear in the grammar, so a chain of
// 10,000 rules costs no deeper recursion than a chain of two.
#include <algorithm>

#include "coordinator/constrain/grammar.h"

namespace llama2::constrain {
namespace {

std::string quoted(const Grammar& g, uint32_t rule) {
  const std::string& name = g.rules()[rule].name;
  return "'" + (name.empty() ? "rule " + std::to_string(rule) : name) + "'";
}

// Least fixpoint of "rule holds when some alternative has every symbol holding". Byte symbols hold
// when `bytes_hold` (productivity) and never otherwise (nullability); empty byte classes never.
std::vector<bool> fixpoint(const Grammar& g, bool bytes_hold) {
  const auto& rules = g.rules();
  std::vector<bool> holds(rules.size(), false);
  struct Alt {
    uint32_t rule;
    size_t pending;
  };
  std::vector<Alt> alts;
  std::vector<std::vector<size_t>> uses(rules.size());  // rule -> alternatives waiting on it
  std::vector<uint32_t> queue;
  for (uint32_t r = 0; r < rules.size(); ++r) {
    for (const Sequence& seq : rules[r].alts) {
      bool possible = true;
      size_t pending = 0;
      for (const Symbol& s : seq) {
        if (s.kind == Symbol::Kind::kBytes) {
          possible = possible && bytes_hold && !g.byte_sets()[s.index].empty();
        } else {
          ++pending;
        }
      }
      if (!possible) continue;
      alts.push_back({r, pending});
      for (const Symbol& s : seq)
        if (s.kind == Symbol::Kind::kRule) uses[s.index].push_back(alts.size() - 1);
      if (pending == 0 && !holds[r]) {
        holds[r] = true;
        queue.push_back(r);
      }
    }
  }
  while (!queue.empty()) {
    const uint32_t r = queue.back();
    queue.pop_back();
    for (size_t a : uses[r]) {
      if (--alts[a].pending == 0 && !holds[alts[a].rule]) {
        holds[alts[a].rule] = true;
        queue.push_back(alts[a].rule);
      }
    }
  }
  return holds;
}

struct Edge {
  uint32_t to;
  bool push;  // something is left to match after `to` in the alternative
};

// The left-corner graph: A -> B when B can be reached at the start of A without consuming input.
std::vector<std::vector<Edge>> left_corners(const Grammar& g, const std::vector<bool>& nullable) {
  std::vector<std::vector<Edge>> edges(g.rules().size());
  for (uint32_t r = 0; r < g.rules().size(); ++r) {
    for (const Sequence& seq : g.rules()[r].alts) {
      for (size_t i = 0; i < seq.size(); ++i) {
        if (seq[i].kind == Symbol::Kind::kBytes) break;
        edges[r].push_back({seq[i].index, i + 1 < seq.size()});
        if (!nullable[seq[i].index]) break;
      }
    }
  }
  return edges;
}

// Strongly connected components (Tarjan's algorithm with an explicit stack).
std::vector<int> components(const std::vector<std::vector<Edge>>& edges) {
  const size_t n = edges.size();
  std::vector<int> index(n, -1), low(n, 0), comp(n, -1);
  std::vector<uint32_t> stack;
  std::vector<bool> on_stack(n, false);
  int next_index = 0, next_comp = 0;
  struct Frame {
    uint32_t v;
    size_t edge;
  };
  for (uint32_t start = 0; start < n; ++start) {
    if (index[start] >= 0) continue;
    std::vector<Frame> call{{start, 0}};
    index[start] = low[start] = next_index++;
    stack.push_back(start);
    on_stack[start] = true;
    while (!call.empty()) {
      Frame& f = call.back();
      if (f.edge < edges[f.v].size()) {
        const uint32_t w = edges[f.v][f.edge++].to;
        if (index[w] < 0) {
          index[w] = low[w] = next_index++;
          stack.push_back(w);
          on_stack[w] = true;
          call.push_back({w, 0});
        } else if (on_stack[w]) {
          low[f.v] = std::min(low[f.v], index[w]);
        }
        continue;
      }
      const uint32_t v = f.v;
      call.pop_back();
      if (!call.empty()) low[call.back().v] = std::min(low[call.back().v], low[v]);
      if (low[v] != index[v]) continue;
      uint32_t w;
      do {
        w = stack.back();
        stack.pop_back();
        on_stack[w] = false;
        comp[w] = next_comp;
      } while (w != v);
      ++next_comp;
    }
  }
  return comp;
}

}  // namespace

std::vector<bool> nullable_rules(const Grammar& g) {
  return fixpoint(g, false);
}

std::vector<bool> reachable_rules(const Grammar& g) {
  std::vector<bool> seen(g.rules().size(), false);
  if (g.rules().empty()) return seen;
  std::vector<uint32_t> todo{g.root()};
  seen[g.root()] = true;
  while (!todo.empty()) {
    const uint32_t r = todo.back();
    todo.pop_back();
    for (const Sequence& seq : g.rules()[r].alts) {
      for (const Symbol& s : seq) {
        if (s.kind == Symbol::Kind::kRule && !seen[s.index]) {
          seen[s.index] = true;
          todo.push_back(s.index);
        }
      }
    }
  }
  return seen;
}

void check(const Grammar& g) {
  if (g.rules().empty()) throw ConstraintError("the grammar has no rules");
  const std::vector<bool> live = reachable_rules(g);
  for (uint32_t r = 0; r < g.rules().size(); ++r) {
    if (live[r] && !g.rules()[r].defined) {
      throw ConstraintError("rule " + quoted(g, r) + " is used but never defined");
    }
  }
  const std::vector<bool> productive = fixpoint(g, true);
  for (uint32_t r = 0; r < g.rules().size(); ++r) {
    if (live[r] && !productive[r]) {
      throw ConstraintError("rule " + quoted(g, r) +
                            " matches no finite text (every alternative recurses forever or is "
                            "empty), so generation could never stop");
    }
  }
  const std::vector<bool> nullable = fixpoint(g, false);
  const auto edges = left_corners(g, nullable);
  const std::vector<int> comp = components(edges);
  for (uint32_t r = 0; r < g.rules().size(); ++r) {
    if (!live[r]) continue;
    for (const Edge& e : edges[r]) {
      if (e.push && comp[e.to] == comp[r]) {
        throw ConstraintError("rule " + quoted(g, r) + " is left-recursive (through " +
                              quoted(g, e.to) +
                              " it reaches itself before matching any text); rewrite it with "
                              "repetition, e.g. x ::= y (\",\" y)*");
      }
    }
  }
}

}  // namespace llama2::constrain
