#!/usr/bin/env bash
# The shim exports exactly the functions declared in its header: nothing from the statically linked
# C++ client, nlohmann/json or libstdc++ (they would clash with other native libraries in the JVM),
# and nothing declared is missing.
#   usage: check_exports.sh libllama2shim.so llama2_shim.h
set -euo pipefail
lib=$1 header=$2
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort -u)
declared=$(grep -oE '\bllama2_shim_[a-z_]+\(' "$header" | tr -d '(' | sort -u)
status=0
extra=$(comm -23 <(echo "$exported") <(echo "$declared"))
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
if [[ -n "$extra" ]]; then
  echo "FAIL: $lib exports symbols not in $header:"; echo "$extra" | head -20; status=1
fi
if [[ -n "$missing" ]]; then
  echo "FAIL: functions of $header not exported by $lib:"; echo "$missing"; status=1
fi
# The header is plain C (what JNA and other FFIs bind against).
if command -v cc > /dev/null && ! cc -std=c99 -Wall -Wextra -pedantic -Werror -fsyntax-only -x c "$header"; then
  echo "FAIL: $header does not compile as C99"; status=1
fi
# The library must not install signal handlers in its host process (the JVM has its own).
if nm -D "$lib" | grep -qE ' U (signal|sigaction)(@|$)'; then
  echo "FAIL: $lib imports signal/sigaction (no handlers may be installed in the JVM)"; status=1
fi
[[ $status -eq 0 ]] && echo "ok: $(echo "$exported" | wc -l) exported functions, all declared in $(basename "$header") (valid C99); no signal handlers"
exit $status
