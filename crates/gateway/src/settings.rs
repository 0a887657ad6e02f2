//! The run-time parameters a session may `SET`, as PostgreSQL 15 names them.
//!
//! Clients and tools set parameters when they connect (`application_name`,
//! `extra_float_digits`, `search_path`, ...). A parameter PostgreSQL lets a
//! session change is accepted, and `SHOW` (and `RESET`) see the session's
//! value; the few RockStream acts on are handled where they act
//! (`statement_timeout`, the isolation levels), and the ones whose value
//! RockStream fixes (`TimeZone` UTC, `DateStyle` ISO, `client_encoding`
//! UTF8) keep it. A name PostgreSQL does not know is refused with 42704,
//! as PostgreSQL refuses it, and so is one under RockStream's own
//! `rockstream.` prefix that RockStream does not define. Other dotted names
//! are custom parameters, which PostgreSQL accepts from any session.

/// The parameters whose `pg_settings.context` is `user` or `superuser` in
/// PostgreSQL 15, and those PostgreSQL 16 and 17 added (`pg_dump` 17
/// writes `SET transaction_timeout = 0`), lower case, sorted (for binary
/// search).
const SESSION_PARAMETERS: &[&str] = &[
    "allow_in_place_tablespaces",
    "allow_system_table_mods",
    "application_name",
    "array_nulls",
    "backend_flush_after",
    "backslash_quote",
    "backtrace_functions",
    "bytea_output",
    "check_function_bodies",
    "client_connection_check_interval",
    "client_encoding",
    "client_min_messages",
    "commit_delay",
    "commit_siblings",
    "compute_query_id",
    "constraint_exclusion",
    "cpu_index_tuple_cost",
    "cpu_operator_cost",
    "cpu_tuple_cost",
    "createrole_self_grant",
    "cursor_tuple_fraction",
    "datestyle",
    "deadlock_timeout",
    "debug_discard_caches",
    "debug_logical_replication_streaming",
    "debug_parallel_query",
    "debug_pretty_print",
    "debug_print_parse",
    "debug_print_plan",
    "debug_print_rewritten",
    "default_statistics_target",
    "default_table_access_method",
    "default_tablespace",
    "default_text_search_config",
    "default_toast_compression",
    "default_transaction_deferrable",
    "default_transaction_isolation",
    "default_transaction_read_only",
    "dynamic_library_path",
    "effective_cache_size",
    "effective_io_concurrency",
    "enable_async_append",
    "enable_bitmapscan",
    "enable_gathermerge",
    "enable_group_by_reordering",
    "enable_hashagg",
    "enable_hashjoin",
    "enable_incremental_sort",
    "enable_indexonlyscan",
    "enable_indexscan",
    "enable_material",
    "enable_memoize",
    "enable_mergejoin",
    "enable_nestloop",
    "enable_parallel_append",
    "enable_parallel_hash",
    "enable_partition_pruning",
    "enable_partitionwise_aggregate",
    "enable_partitionwise_join",
    "enable_presorted_aggregate",
    "enable_seqscan",
    "enable_sort",
    "enable_tidscan",
    "escape_string_warning",
    "event_triggers",
    "exit_on_error",
    "extension_destdir",
    "extra_float_digits",
    "force_parallel_mode",
    "from_collapse_limit",
    "geqo",
    "geqo_effort",
    "geqo_generations",
    "geqo_pool_size",
    "geqo_seed",
    "geqo_selection_bias",
    "geqo_threshold",
    "gin_fuzzy_search_limit",
    "gin_pending_list_limit",
    "hash_mem_multiplier",
    "icu_validation_level",
    "idle_in_transaction_session_timeout",
    "idle_session_timeout",
    "ignore_checksum_failure",
    "intervalstyle",
    "io_combine_limit",
    "jit",
    "jit_above_cost",
    "jit_dump_bitcode",
    "jit_expressions",
    "jit_inline_above_cost",
    "jit_optimize_above_cost",
    "jit_tuple_deforming",
    "join_collapse_limit",
    "lc_messages",
    "lc_monetary",
    "lc_numeric",
    "lc_time",
    "lo_compat_privileges",
    "local_preload_libraries",
    "lock_timeout",
    "log_duration",
    "log_error_verbosity",
    "log_executor_stats",
    "log_lock_waits",
    "log_min_duration_sample",
    "log_min_duration_statement",
    "log_min_error_statement",
    "log_min_messages",
    "log_parameter_max_length",
    "log_parameter_max_length_on_error",
    "log_parser_stats",
    "log_planner_stats",
    "log_replication_commands",
    "log_statement",
    "log_statement_sample_rate",
    "log_statement_stats",
    "log_temp_files",
    "log_transaction_sample_rate",
    "logical_decoding_work_mem",
    "maintenance_io_concurrency",
    "maintenance_work_mem",
    "max_parallel_maintenance_workers",
    "max_parallel_workers",
    "max_parallel_workers_per_gather",
    "max_stack_depth",
    "min_parallel_index_scan_size",
    "min_parallel_table_scan_size",
    "parallel_leader_participation",
    "parallel_setup_cost",
    "parallel_tuple_cost",
    "password_encryption",
    "plan_cache_mode",
    "quote_all_identifiers",
    "random_page_cost",
    "recursive_worktable_factor",
    "restrict_nonsystem_relation_kind",
    "row_security",
    "scram_iterations",
    "search_path",
    "seq_page_cost",
    "session_preload_libraries",
    "session_replication_role",
    "standard_conforming_strings",
    "statement_timeout",
    "stats_fetch_consistency",
    "synchronize_seqscans",
    "synchronous_commit",
    "tcp_keepalives_count",
    "tcp_keepalives_idle",
    "tcp_keepalives_interval",
    "tcp_user_timeout",
    "temp_buffers",
    "temp_file_limit",
    "temp_tablespaces",
    "timezone",
    "timezone_abbreviations",
    "trace_notify",
    "trace_sort",
    "track_activities",
    "track_counts",
    "track_functions",
    "track_io_timing",
    "track_wal_io_timing",
    "transaction_deferrable",
    "transaction_isolation",
    "transaction_read_only",
    "transaction_timeout",
    "transform_null_equals",
    "update_process_title",
    "vacuum_buffer_usage_limit",
    "vacuum_cost_delay",
    "vacuum_cost_limit",
    "vacuum_cost_page_dirty",
    "vacuum_cost_page_hit",
    "vacuum_cost_page_miss",
    "vacuum_failsafe_age",
    "vacuum_freeze_min_age",
    "vacuum_freeze_table_age",
    "vacuum_multixact_failsafe_age",
    "vacuum_multixact_freeze_min_age",
    "vacuum_multixact_freeze_table_age",
    "wal_compression",
    "wal_consistency_checking",
    "wal_init_zero",
    "wal_recycle",
    "wal_sender_timeout",
    "wal_skip_threshold",
    "work_mem",
    "xmlbinary",
    "xmloption",
    "zero_damaged_pages",
];

/// What `SHOW` and `current_setting()` report for parameters a session has
/// not set: PostgreSQL 15's defaults (with the C locale RockStream's
/// ordering follows), including read-only ones clients read when they
/// connect (`max_identifier_length`, `integer_datetimes`, ...).
const DEFAULTS: &[(&str, &str)] = &[
    ("application_name", ""),
    ("block_size", "8192"),
    ("bytea_output", "hex"),
    ("check_function_bodies", "on"),
    ("client_min_messages", "notice"),
    ("default_transaction_read_only", "off"),
    ("escape_string_warning", "on"),
    ("extra_float_digits", "1"),
    ("integer_datetimes", "on"),
    ("intervalstyle", "postgres"),
    ("is_superuser", "on"),
    ("lc_collate", "C"),
    ("lc_ctype", "C"),
    ("lc_messages", "C"),
    ("lc_monetary", "C"),
    ("lc_numeric", "C"),
    ("lc_time", "C"),
    ("max_identifier_length", "63"),
    ("row_security", "on"),
    ("search_path", "\"$user\", public"),
    ("synchronous_commit", "on"),
    ("transaction_read_only", "off"),
    ("work_mem", "4MB"),
    ("xmloption", "content"),
];

/// The default of parameter `name` (lower case), if [`DEFAULTS`] has it.
pub(crate) fn default_value(name: &str) -> Option<&'static str> {
    DEFAULTS
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, value)| *value)
}

/// The names [`DEFAULTS`] knows.
pub(crate) fn defaulted_names() -> impl Iterator<Item = &'static str> {
    DEFAULTS.iter().map(|(name, _)| *name)
}

/// Whether a session may set `name` (lower case).
pub(crate) fn is_settable(name: &str) -> bool {
    if let Some((prefix, _)) = name.split_once('.') {
        return prefix != "rockstream";
    }
    SESSION_PARAMETERS.binary_search(&name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgresql_parameters_and_custom_ones_are_settable() {
        assert!(SESSION_PARAMETERS.windows(2).all(|pair| pair[0] < pair[1]));
        for name in [
            "application_name",
            "search_path",
            "extra_float_digits",
            "myapp.user_id",
        ] {
            assert!(is_settable(name), "{name}");
        }
        for name in ["no_such_parameter", "rockstream.anything", "shared_buffers"] {
            assert!(!is_settable(name), "{name}");
        }
    }
}
