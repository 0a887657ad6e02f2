#!/usr/bin/env bash
# The one test command: provisions a throwaway PostgreSQL server (the oracle the differential,
# corpus and .slt tests compare RockStream with), exports ROCKSTREAM_TEST_PG_URL, installs the
# clients the client-compatibility checks use (Python from PyPI, Node from npm, pgjdbc from apt;
# exports ROCKSTREAM_TEST_PYTHON, ROCKSTREAM_TEST_NODE_PATH, ROCKSTREAM_TEST_JDBC_JAR), runs
# `cargo test --workspace` (extra arguments are passed through to it), then `cargo fmt --check`
# and `cargo clippy -D warnings`. Exits non-zero if any step fails. The PostgreSQL server lives in
# a fresh temporary folder and is stopped and removed on exit, whatever the outcome.
#
# A full run tests at one shard, then runs the control and end-to-end suites again at four shards.
#
# Usage:
#   scripts/test.sh                              # everything, at 1 and at 4 shards
#   ROCKSTREAM_TEST_SHARDS=4 scripts/test.sh     # everything, at 4 shards only
#   scripts/test.sh -p rockstream --test it      # one test binary (fmt and clippy still run)
#   ROCKSTREAM_TEST_SKIP_LINT=1 scripts/test.sh  # tests only
#   scripts/test.sh --pg-shell                   # start the oracle, open a shell with the URL set
set -euo pipefail

repository_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repository_root"

log() { printf '[test.sh] %s\n' "$*" >&2; }

# --- (a) make sure a PostgreSQL server is installed ------------------------------------------
find_postgres_bin() {
    local candidate found=""
    for candidate in /usr/lib/postgresql/*/bin; do
        if [[ -x "$candidate/initdb" && -x "$candidate/pg_ctl" ]]; then
            found="$candidate" # the glob sorts by name; the last one is the newest major version
        fi
    done
    printf '%s' "$found"
}

# Installs Debian packages (as root, or with password-less sudo).
apt_install() {
    local privileged=()
    if [[ "$(id -u)" != 0 ]]; then
        if command -v sudo >/dev/null; then
            privileged=(sudo -n)
        else
            log "this is not root and sudo is missing: install the packages $* yourself"
            exit 1
        fi
    fi
    log "installing $* with apt-get"
    "${privileged[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    "${privileged[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "$@" >/dev/null
}

postgres_bin="$(find_postgres_bin)"
if [[ -z "$postgres_bin" ]]; then
    log "PostgreSQL not found under /usr/lib/postgresql/*/bin"
    apt_install postgresql
    postgres_bin="$(find_postgres_bin)"
    if [[ -z "$postgres_bin" ]]; then
        log "apt-get installed postgresql but no initdb appeared under /usr/lib/postgresql/*/bin"
        exit 1
    fi
fi

# --- (b) start a throwaway server on a free loopback port ------------------------------------
postgres_directory=""
postgres_data=""
run_as_postgres=()

stop_postgres() {
    if [[ -n "$postgres_data" && -f "$postgres_data/postmaster.pid" ]]; then
        "${run_as_postgres[@]}" "$postgres_bin/pg_ctl" -D "$postgres_data" -m immediate -w stop \
            >/dev/null 2>&1 || true
    fi
    if [[ -n "$postgres_directory" && -d "$postgres_directory" ]]; then
        rm -rf "$postgres_directory"
    fi
    postgres_directory=""
    postgres_data=""
}
trap stop_postgres EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# PostgreSQL refuses to run as root: run it as the 'postgres' system user (the Debian package
# creates it), creating an unprivileged user if it is missing.
if [[ "$(id -u)" == 0 ]]; then
    if ! id -u postgres >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin postgres
    fi
    run_as_postgres=(runuser -u postgres --)
else
    run_as_postgres=(env)
fi

port_is_taken() {
    # A successful connect means something listens there already.
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start_postgres() {
    postgres_directory="$(mktemp -d "${TMPDIR:-/tmp}/rockstream-test-pg.XXXXXX")"
    postgres_data="$postgres_directory/data"
    if [[ "$(id -u)" == 0 ]]; then
        chown postgres: "$postgres_directory"
    fi
    chmod 700 "$postgres_directory"
    (
        cd "$postgres_directory"
        "${run_as_postgres[@]}" "$postgres_bin/initdb" -D "$postgres_data" -U postgres \
            --auth=trust --encoding=UTF8 --no-locale --no-sync \
            >"$postgres_directory/initdb.log" 2>&1
    ) || {
        cat "$postgres_directory/initdb.log" >&2
        return 1
    }

    local attempt port
    for attempt in 1 2 3 4 5 6 7 8 9 10; do
        port=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
        if port_is_taken "$port"; then
            continue
        fi
        if (
            cd "$postgres_directory"
            "${run_as_postgres[@]}" "$postgres_bin/pg_ctl" -D "$postgres_data" \
                -l "$postgres_directory/server.log" -w -t 60 \
                -o "-p $port -k $postgres_directory -c listen_addresses=127.0.0.1" \
                -o "-c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
                -o "-c max_connections=300 -c shared_buffers=64MB" \
                start >/dev/null
        ); then
            postgres_port="$port"
            return 0
        fi
        log "PostgreSQL did not start on port $port (attempt $attempt); server log:"
        tail -n 5 "$postgres_directory/server.log" >&2 || true
    done
    return 1
}

if [[ -n "${ROCKSTREAM_TEST_PG_URL:-}" ]]; then
    log "using the PostgreSQL oracle already given in ROCKSTREAM_TEST_PG_URL"
else
    start_postgres || {
        log "could not start the PostgreSQL oracle"
        exit 1
    }
    export ROCKSTREAM_TEST_PG_URL="host=127.0.0.1 port=$postgres_port user=postgres dbname=postgres"
    log "PostgreSQL oracle ($("$postgres_bin/postgres" --version)) at: $ROCKSTREAM_TEST_PG_URL"
fi

# --- (c) the client drivers the client-compatibility checks run (`it::clients`) ---------------
# Installed from PyPI into a virtual environment kept in the user's cache, rebuilt only when the
# pinned requirements change.
provision_python_clients() {
    local requirements="$repository_root/crates/rockstream/tests/clients/python/requirements.txt"
    local environment="${ROCKSTREAM_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rockstream-test}/python"
    # The environment is reused while the requirements and the interpreter are the same.
    local stamp
    stamp="$(python3 --version 2>&1; cat "$requirements")" || return 1
    if [[ -x "$environment/bin/python" && "$(cat "$environment/installed.txt" 2>/dev/null)" == "$stamp" ]]; then
        export ROCKSTREAM_TEST_PYTHON="$environment/bin/python"
        return 0
    fi
    log "installing the Python clients (psycopg2, psycopg 3, asyncpg, SQLAlchemy, pandas) in $environment"
    rm -rf "$environment" || return 1
    python3 -m venv "$environment" || return 1
    "$environment/bin/python" -m pip install --quiet --disable-pip-version-check \
        -r "$requirements" || return 1
    printf '%s' "$stamp" >"$environment/installed.txt" || return 1
    export ROCKSTREAM_TEST_PYTHON="$environment/bin/python"
}

if [[ -n "${ROCKSTREAM_TEST_PYTHON:-}" ]]; then
    log "using the Python clients of ROCKSTREAM_TEST_PYTHON=$ROCKSTREAM_TEST_PYTHON"
else
    provision_python_clients || {
        log "could not install the Python clients (python3 -m venv, then pip from PyPI)"
        exit 1
    }
fi

# Node's `pg` and `pg-copy-streams`, pinned by package-lock.json, installed by `npm ci` into the
# cache, again only when the lock file (or Node's version) changes.
provision_node_clients() {
    local source="$repository_root/crates/rockstream/tests/clients/node"
    local directory="${ROCKSTREAM_TEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rockstream-test}/node"
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        apt_install nodejs npm
    fi
    local stamp
    stamp="$(node --version; cat "$source/package-lock.json")" || return 1
    if [[ -d "$directory/node_modules" && "$(cat "$directory/installed.txt" 2>/dev/null)" == "$stamp" ]]; then
        export ROCKSTREAM_TEST_NODE_PATH="$directory/node_modules"
        return 0
    fi
    log "installing the Node clients (npm ci) into $directory"
    # (`set -e` does not apply inside a function called before `||`.)
    rm -rf "$directory" || return 1
    mkdir -p "$directory" || return 1
    cp "$source/package.json" "$source/package-lock.json" "$directory/" || return 1
    (cd "$directory" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || return 1
    printf '%s' "$stamp" >"$directory/installed.txt" || return 1
    export ROCKSTREAM_TEST_NODE_PATH="$directory/node_modules"
}

if [[ -n "${ROCKSTREAM_TEST_NODE_PATH:-}" ]]; then
    log "using the Node clients of ROCKSTREAM_TEST_NODE_PATH=$ROCKSTREAM_TEST_NODE_PATH"
else
    provision_node_clients || {
        log "could not install the Node clients (npm ci from the npm registry)"
        exit 1
    }
fi

# pgjdbc from Debian (and a JDK to run the checks' single source file).
if [[ -z "${ROCKSTREAM_TEST_JDBC_JAR:-}" ]]; then
    if ! command -v javac >/dev/null; then
        apt_install default-jdk-headless
    fi
    if [[ ! -f /usr/share/java/postgresql.jar ]]; then
        apt_install libpostgresql-jdbc-java
    fi
    export ROCKSTREAM_TEST_JDBC_JAR=/usr/share/java/postgresql.jar
fi
log "using pgjdbc at ROCKSTREAM_TEST_JDBC_JAR=$ROCKSTREAM_TEST_JDBC_JAR"

if [[ "${1:-}" == "--pg-shell" ]]; then
    log "oracle shell: ROCKSTREAM_TEST_PG_URL is set; exit the shell to stop the server"
    "${SHELL:-bash}" || true
    exit 0
fi

# --- (d) tests, formatting, lints ------------------------------------------------------------
# `--workspace` is left out when the caller picks packages with -p/--package.
workspace_flag=(--workspace)
for argument in "$@"; do
    case "$argument" in
        --) break ;;
        -p | -p* | --package | --package=*) workspace_flag=() ;;
    esac
done

failures=()
log "cargo test --no-fail-fast ${workspace_flag[*]} $*"
cargo test --no-fail-fast "${workspace_flag[@]}" "$@" || failures+=("cargo test")

# The storage-level and end-to-end suites again at four shards (the run above uses the shard count
# in ROCKSTREAM_TEST_SHARDS, 1 by default); the operators' property tests cover 1, 2 and 4 shards
# on their own. Only in a full run: a run of chosen packages or tests is left as asked. The
# suites are chosen with `--workspace` and a target kind, not `-p`: a single package resolves
# its dependencies' features alone, which rebuilds DataFusion (about 15 minutes).
if (($# == 0)) && [[ -z "${ROCKSTREAM_TEST_SHARDS:-}" ]]; then
    for suite in "--workspace --lib" "--workspace --test it"; do
        log "ROCKSTREAM_TEST_SHARDS=4 cargo test --no-fail-fast $suite"
        # shellcheck disable=SC2086 # the suite is two words on purpose
        ROCKSTREAM_TEST_SHARDS=4 cargo test --no-fail-fast $suite ||
            failures+=("cargo test $suite at 4 shards")
    done
fi

if [[ -z "${ROCKSTREAM_TEST_SKIP_LINT:-}" ]]; then
    log "cargo fmt --all -- --check"
    cargo fmt --all -- --check || failures+=("cargo fmt")
    log "cargo clippy --workspace --all-targets -- -D warnings"
    cargo clippy --workspace --all-targets -- -D warnings || failures+=("cargo clippy")
fi

if ((${#failures[@]} > 0)); then
    log "FAILED: ${failures[*]}"
    exit 1
fi
log "all steps passed"
