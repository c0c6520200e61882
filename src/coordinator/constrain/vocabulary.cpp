#include "coordinator/constrain/vocabulary.h"

#include <algorithm>

#include "common/check.h"
#include "coordinator/text/tokenizer.h"

namespace llama2::constrain {

FlatTrie FlatTrie::build(std::vector<Entry> entries) {
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [](const Entry& e) { return e.bytes.empty(); }),
                entries.end());
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.bytes != b.bytes ? a.bytes < b.bytes : a.id < b.id;
  });
  FlatTrie t;
  t.byte.push_back(0);
  t.depth.push_back(0);
  std::vector<uint32_t> node_of_entry;
  std::vector<uint32_t> path{0};  // path[d]: node at depth d on the current string
  const std::string* prev = nullptr;
  for (const Entry& e : entries) {
    size_t common = 0;
    if (prev != nullptr) {
      while (common < prev->size() && common < e.bytes.size() && (*prev)[common] == e.bytes[common])
        ++common;
    }
    path.resize(common + 1);
    for (size_t d = common; d < e.bytes.size(); ++d) {
      LLAMA2_CHECK(d + 1 < 65536);
      t.byte.push_back(static_cast<uint8_t>(e.bytes[d]));
      t.depth.push_back(static_cast<uint16_t>(d + 1));
      path.push_back(static_cast<uint32_t>(t.byte.size() - 1));
    }
    node_of_entry.push_back(path.back());
    prev = &e.bytes;
  }
  const size_t n = t.byte.size();
  // Subtree ends: a node's subtree ends where the next node of depth <= its own begins.
  t.subtree_end.assign(n, static_cast<uint32_t>(n));
  std::vector<uint32_t> open;
  for (uint32_t i = 0; i < n; ++i) {
    while (!open.empty() && t.depth[open.back()] >= t.depth[i]) {
      t.subtree_end[open.back()] = i;
      open.pop_back();
    }
    open.push_back(i);
  }
  // Entries are sorted, so their nodes are nondecreasing: ids group by node in order.
  t.ids_begin.assign(n + 1, 0);
  for (uint32_t node : node_of_entry) ++t.ids_begin[node + 1];
  for (size_t i = 0; i < n; ++i) t.ids_begin[i + 1] += t.ids_begin[i];
  for (size_t k = 0; k < entries.size(); ++k) {
    t.ids.push_back(entries[k].id);
    t.tag.push_back(entries[k].tag);
  }
  return t;
}

TokenVocabulary::TokenVocabulary(const std::vector<Piece>& pieces, int eos_id) : eos_id_(eos_id) {
  static const std::string kSpaceSymbol = "\xE2\x96\x81";  // U+2581
  const size_t n = pieces.size();
  bytes_.resize(n);
  first_bytes_.resize(n);
  usable_.assign(n, 0);
  std::vector<FlatTrie::Entry> entries, first_entries;
  for (size_t id = 0; id < n; ++id) {
    const Piece& p = pieces[id];
    if (p.kind == PieceKind::kByte) {
      LLAMA2_CHECK_MSG("vocabulary", p.text.size() == 6 && p.text.compare(0, 3, "<0x") == 0,
                       "byte piece spelling", "piece '" + p.text + "'");
      bytes_[id] = std::string(1, static_cast<char>(std::stoi(p.text.substr(3, 2), nullptr, 16)));
      first_bytes_[id] = bytes_[id];  // byte pieces keep their space (SentencePiece's decode)
    } else if (p.kind == PieceKind::kNormal) {
      std::string text;
      for (size_t i = 0; i < p.text.size();) {
        if (p.text.compare(i, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
          text += ' ';
          i += kSpaceSymbol.size();
        } else {
          text += p.text[i++];
        }
      }
      bytes_[id] = text;
      first_bytes_[id] = !text.empty() && text[0] == ' ' ? text.substr(1) : text;
    } else {
      continue;  // control and unknown pieces: no text, never allowed
    }
    usable_[id] = 1;
    max_token_bytes_ = std::max(max_token_bytes_, bytes_[id].size());
    entries.push_back({bytes_[id], static_cast<int32_t>(id), 0});
    first_entries.push_back({first_bytes_[id], static_cast<int32_t>(id), 0});
  }
  trie_ = FlatTrie::build(std::move(entries));
  first_trie_ = FlatTrie::build(std::move(first_entries));
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_tokenizer(const Tokenizer& tok) {
  std::vector<Piece> pieces(static_cast<size_t>(tok.vocab_size()));
  for (int id = 0; id < tok.vocab_size(); ++id) {
    PieceKind kind = PieceKind::kNormal;
    if (id == tok.unk_id()) {
      kind = PieceKind::kUnknown;
    } else if (tok.is_control(id)) {
      kind = PieceKind::kControl;
    } else if (tok.is_byte(id)) {
      kind = PieceKind::kByte;
    }
    pieces[static_cast<size_t>(id)] = {tok.id_to_piece(id), kind};
  }
  return std::make_shared<const TokenVocabulary>(pieces, tok.eos_id());
}

}  // namespace llama2::constrain
