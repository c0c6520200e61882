#!/usr/bin/env bash
# `llama2 serve --http` behind nginx with TLS, as docs/serving.md ("TLS behind nginx") sets it up:
# launch/nginx/llama2-tls.conf with this test's ports and a certificate made here by openssl (a CA
# and a server certificate for localhost / 127.0.0.1), nginx as this user in a temporary prefix,
# a real 2-rank server started by launch/llama2-mpirun (steps of at least 50 ms, so that a stream
# lasts; a key file re-read on SIGUSR2 to the wrapper), and the official OpenAI
# Python client over https verifying against the CA (tests/http/test_nginx_tls.py): SSE arrives
# while the generation runs, a client that hangs up mid-stream frees its KV blocks, and SIGUSR2 to
# the wrapper (the systemd unit's reload) makes rank 0 re-read the key file.
#   usage: nginx_tls.sh LLAMA2 MODELS
# Installs nothing: without nginx or openssl (launch/install-deps.sh --test installs Debian's) it is
# skipped (exit 77); without the .venv's openai and pytest as http.openai_client.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
NGINX=$(command -v nginx || { [[ -x /usr/sbin/nginx ]] && echo /usr/sbin/nginx; })
if [[ -z $NGINX ]] || ! command -v openssl >/dev/null; then
  echo "SKIP: http.nginx_tls: nginx or openssl is not installed (bash launch/install-deps.sh --test installs Debian's nginx and openssl)" >&2
  exit 77
fi
# shellcheck source=tests/test_python.sh
source "$HERE/../test_python.sh"
# The server is started by launch/llama2-mpirun as the systemd unit runs it (wrapper_np.sh: the
# wrapper under a time limit, mpirun.sh's calling convention).
HTTP_LAUNCHER=$HERE/../integration/wrapper_np.sh
# shellcheck source=tests/http/server_lib.sh
source "$HERE/server_lib.sh"
test_python http.nginx_tls openai pytest
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# ---- a CA and a server certificate it signs (EC keys: made in milliseconds)
tls=$TMP/tls
mkdir -p "$tls"
{
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -keyout "$tls/ca.key" -out "$tls/ca.pem" -subj "/CN=llama2 test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -keyout "$tls/server.key" -out "$tls/server.csr" -subj "/CN=localhost" &&
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$tls/ext" &&
    openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
      -days 1 -out "$tls/server.pem" -extfile "$tls/ext"
} >"$TMP/openssl.log" 2>&1 && pass "openssl: a CA and a certificate for localhost" || { fail "openssl"; cat "$TMP/openssl.log"; finish; exit; }

# ---- the server, with a key file: SIGUSR2 to the wrapper must reach rank 0, which re-reads the
# file (test_nginx_tls.py).
export API_KEY=tls-key-$RANDOM MODEL=tiny-gqa KEY_FILE=$TMP/api-keys
printf '# keys\nfile-key-1\n' >"$KEY_FILE"
# The wrapper's own Open MPI choices: nothing from the caller's environment.
unset OMPI_MCA_btl OMPI_MCA_oob_tcp_if_include OMPI_MCA_odls_base_sigkill_timeout
http_serve serve LLAMA2_TEST_TIMEOUT=110 LLAMA2_TEST_STEP_DELAY_MS=50 LLAMA2_API_KEY="$API_KEY" -- \
  --model "$MODELS/tiny-gqa" --max-seq-len 512 --cpu-threads 1 --access-log text \
  --api-key-file "$KEY_FILE" --quiet
http_up serve UPSTREAM
# The wrapper (the unit's main process, $MAINPID): `timeout`'s child.
WRAPPER_PID=$(pgrep -P "${HTTP_JOB[serve]}" -f llama2-mpirun | head -n1)
export WRAPPER_PID SERVE_LOG=$TMP/serve.log

# ---- nginx: the recipe's file, its ports and paths replaced; a prefix of its own, as this user
ng=$TMP/nginx
mkdir -p "$ng"
PORT=$(free_port)
sed -e "s|127.0.0.1:8000|127.0.0.1:$UPSTREAM|" -e "s|listen 443 ssl;|listen 127.0.0.1:$PORT ssl;|" \
  -e "s|/etc/nginx/tls/llama2.pem|$tls/server.pem|" -e "s|/etc/nginx/tls/llama2.key|$tls/server.key|" \
  "$ROOT/launch/nginx/llama2-tls.conf" >"$ng/llama2.conf"
grep -q "127.0.0.1:$PORT ssl" "$ng/llama2.conf" && grep -q "$tls/server.key" "$ng/llama2.conf" ||
  fail "the recipe's listen / certificate lines were not found to replace"
user=""
[[ $EUID -eq 0 ]] && user="user root;"  # root's workers would otherwise run as nobody
cat >"$ng/nginx.conf" <<CONF
$user
worker_processes 1;
pid $ng/nginx.pid;
error_log $ng/error.log info;
events { worker_connections 256; }
http {
  access_log $ng/access.log;
  client_body_temp_path $ng/body;
  proxy_temp_path $ng/proxy;
  fastcgi_temp_path $ng/fastcgi;
  uwsgi_temp_path $ng/uwsgi;
  scgi_temp_path $ng/scgi;
  include $ng/llama2.conf;
}
CONF
"$NGINX" -p "$ng" -e "$ng/error.log" -c "$ng/nginx.conf" -g 'daemon off;' >"$ng/stdout.log" 2>&1 &
nginx_pid=$!
up=0
for _ in $(seq 100); do
  curl -s --cacert "$tls/ca.pem" -o /dev/null "https://localhost:$PORT/health" && { up=1; break; }
  sleep 0.1
done
[[ $up == 1 ]] && pass "nginx on https://localhost:$PORT -> llama2 on 127.0.0.1:$UPSTREAM" ||
  { fail "nginx did not answer"; cat "$ng/stdout.log" "$ng/error.log"; }

# ---- the OpenAI client over TLS
export BASE=https://localhost:$PORT CA=$tls/ca.pem
[[ $up == 1 ]] && http_pytest "openai python client through nginx" 90 "$HERE/test_nginx_tls.py"
# The request id nginx passed on is in llama2's access line.
grep -q 'request_id="tls-request-1".*"POST /v1/completions" 200' "$TMP/serve.log" &&
  pass "llama2's access log has the request id sent through nginx" || fail "no access line for tls-request-1: $(grep request_id "$TMP/serve.log" | head -3)"

kill -TERM "$nginx_pid" 2>/dev/null
wait "$nginx_pid" 2>/dev/null
kill -TERM "$WRAPPER_PID" 2>/dev/null  # as systemctl stop: the wrapper drains rank 0
http_end serve
finish
