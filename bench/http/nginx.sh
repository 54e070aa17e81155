# Sourced by bench/http/run.sh and bench/http/profile.sh: the nginx `limit_req` baseline they measure.

# Prints a TCP port of 127.0.0.1 that nothing answers on (tried at random among 20000-59999), or fails.
free_port() {
  local candidate
  for _ in $(seq 1 50); do
    candidate=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "no free port for nginx" >&2
  return 1
}

# write_nginx_conf DIR PORT PROCESS_MODEL: writes DIR/nginx.conf. What a user would run instead of
# ringlimit: limit_req keyed by the same query argument, answering 200 (empty_gif: a content handler, so
# limit_req's phase runs) or 429 when limited. /v1/check admits everything (zone "allowed"); /v1/denied
# admits one request per key per minute. PROCESS_MODEL: "worker" (a master and one worker process) or
# "single" (master_process off: one process, for valgrind).
write_nginx_conf() {
  local dir=$1 port=$2 processes="worker_processes 1;"
  [[ $3 == single ]] && processes="master_process off;"
  mkdir -p "$dir"
  cat >"$dir/nginx.conf" <<EOF
$processes
daemon off;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  limit_req_zone \$arg_key zone=allowed:64m rate=1000000r/s;
  limit_req_zone \$arg_key zone=denied:64m rate=1r/m;
  limit_req_status 429;
  limit_req_log_level info;  # below error_log's level: refusals are not written to the log
  server {
    listen 127.0.0.1:$port;
    location = /v1/check {
      limit_req zone=allowed burst=1000000 nodelay;
      empty_gif;
    }
    location = /v1/denied {
      limit_req zone=denied;
      empty_gif;
    }
  }
}
EOF
}
