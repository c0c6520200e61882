#!/usr/bin/env bash
# Re-derives the chat-format fixture with Python SentencePiece (tests/reference/make_chat_fixtures.py)
# into OUT and compares it byte for byte with the committed one. Run from the repository root.
#   usage: tests/reference/chat_fixtures.sh OUT
set -euo pipefail
# shellcheck source=tests/test_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/../test_python.sh"
test_python chat.fixtures sentencepiece
"$PY" tests/reference/make_chat_fixtures.py "$1" models/docs-8m tests/models/tiny-gqa
cmp "$1" tests/reference/fixtures/chat/llama2_chat.json
echo "chat.fixtures: $1 equals tests/reference/fixtures/chat/llama2_chat.json"
