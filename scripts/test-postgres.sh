# Sourced by scripts/test.sh: one throwaway Postgres cluster for a test run,
# as tests/support/pg.rs starts one per test process (initdb and pg_ctl from
# Debian's `postgresql`, trust auth on 127.0.0.1, fsync off, as the
# `postgres` user when run as root), exported as SKILLHOST_TEST_DATABASE_URL,
# on which every test creates databases of its own. TEST_PG_OPTIONS replaces
# the server settings that make it fast and unsafe (fsync off), for a
# benchmark; TEST_PG_PSQL is psql on it as the superuser.

test_postgres_start() {
    local bindir
    bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
        if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
            bindir=$(pg_config --bindir)
        else
            echo "error: PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install -y postgresql" >&2
            return 3
        fi
    fi
    TEST_PG_BASE=$(mktemp -d "${TMPDIR:-/tmp}/skillhost-test-pg.XXXXXX")
    local as=()
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$TEST_PG_BASE"
        as=(runuser -u postgres --)
    fi
    TEST_PG_CTL=("${as[@]}" "$bindir/pg_ctl")
    local options="${TEST_PG_OPTIONS--c fsync=off -c full_page_writes=off -c shared_buffers=64MB}"
    "${as[@]}" "$bindir/initdb" -D "$TEST_PG_BASE/data" -U postgres -A trust -E UTF8 \
        --locale=C -N >"$TEST_PG_BASE/initdb.log" 2>&1 ||
        { cat "$TEST_PG_BASE/initdb.log" >&2; return 3; }
    local port try
    for try in 1 2 3 4 5; do
        port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        if "${TEST_PG_CTL[@]}" -D "$TEST_PG_BASE/data" -l "$TEST_PG_BASE/postgres.log" -w -t 60 \
            -o "-p $port -c listen_addresses=127.0.0.1 -k $TEST_PG_BASE -c max_connections=500 $options" \
            start >/dev/null; then
            export SKILLHOST_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$port/postgres"
            TEST_PG_PSQL=("$bindir/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres)
            echo "Postgres for the tests on 127.0.0.1:$port ($TEST_PG_BASE)" >&2
            return 0
        fi
    done
    cat "$TEST_PG_BASE/postgres.log" >&2
    return 3
}

test_postgres_stop() {
    [ -n "${TEST_PG_BASE:-}" ] || return 0
    "${TEST_PG_CTL[@]}" -D "$TEST_PG_BASE/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$TEST_PG_BASE"
}
