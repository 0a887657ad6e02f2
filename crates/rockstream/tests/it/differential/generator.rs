//! Seeded random DML for differential tests: transactions of INSERT / UPDATE / DELETE over the
//! tables of a [`Scenario`], ending in COMMIT, ROLLBACK, or run in autocommit mode.
//!
//! What it aims at: small value domains (so groups collide, joins match and rows repeat), NULLs in
//! every nullable column, deletes and re-inserts of the same key, updates that change nothing,
//! multi-row statements, predicates that hit zero or many rows, and dangling join keys.
//!
//! What it avoids: statements that fail on PostgreSQL (a duplicate primary key, a NULL in a NOT
//! NULL column), since a failed statement aborts the transaction and would make the rest of it
//! uninformative. It knows the current keys from a [`KeySnapshot`] taken on the oracle before each
//! transaction, and tracks the keys its own transaction inserts and deletes.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::Rng;

use super::{ColumnSpec, Scenario, TableSpec, Values};

/// Rows remembered per keyless table, to insert exact duplicates of earlier rows.
const REMEMBERED_ROWS_MAX: usize = 64;

/// Knobs of the generator; [`GeneratorSettings::default`] suits most scenarios.
#[derive(Clone, Debug)]
pub struct GeneratorSettings {
    pub statements_per_transaction_max: usize,
    pub rows_per_insert_max: usize,
    pub rollback_probability: f64,
    pub autocommit_probability: f64,
    pub null_probability: f64,
}

impl Default for GeneratorSettings {
    fn default() -> GeneratorSettings {
        GeneratorSettings {
            statements_per_transaction_max: 4,
            rows_per_insert_max: 3,
            rollback_probability: 0.15,
            autocommit_probability: 0.2,
            null_probability: 0.15,
        }
    }
}

/// How a transaction ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// One statement, no BEGIN: the server commits it by itself.
    Autocommit,
    Commit,
    Rollback,
}

#[derive(Clone, Debug)]
pub struct Transaction {
    pub statements: Vec<String>,
    pub ending: Ending,
}

impl Transaction {
    /// The statements as sent, BEGIN and COMMIT/ROLLBACK included.
    pub fn to_sql_lines(&self) -> Vec<String> {
        match self.ending {
            Ending::Autocommit => self.statements.clone(),
            Ending::Commit | Ending::Rollback => {
                let mut lines = vec!["BEGIN".to_owned()];
                lines.extend(self.statements.iter().cloned());
                lines.push(
                    if self.ending == Ending::Commit {
                        "COMMIT"
                    } else {
                        "ROLLBACK"
                    }
                    .to_owned(),
                );
                lines
            }
        }
    }
}

/// Primary keys present in each keyed table, read on the oracle before a transaction.
pub type KeySnapshot = BTreeMap<String, BTreeSet<i64>>;

pub struct DmlGenerator {
    random: StdRng,
    settings: GeneratorSettings,
    /// Rendered rows inserted earlier into keyless tables, by table.
    remembered_rows: BTreeMap<String, Vec<Vec<String>>>,
}

impl DmlGenerator {
    pub fn new(random: StdRng, settings: GeneratorSettings) -> DmlGenerator {
        DmlGenerator {
            random,
            settings,
            remembered_rows: BTreeMap::new(),
        }
    }

    pub fn transaction(&mut self, scenario: &Scenario, keys: &KeySnapshot) -> Transaction {
        let ending = if self
            .random
            .random_bool(self.settings.autocommit_probability)
        {
            Ending::Autocommit
        } else if self.random.random_bool(self.settings.rollback_probability) {
            Ending::Rollback
        } else {
            Ending::Commit
        };
        let statement_count = match ending {
            Ending::Autocommit => 1,
            _ => self
                .random
                .random_range(1..=self.settings.statements_per_transaction_max),
        };
        let mut keys = keys.clone();
        let statements = (0..statement_count)
            .map(|_| {
                let table = scenario
                    .tables
                    .choose(&mut self.random)
                    .expect("a scenario has tables");
                let table_keys = keys.entry(table.name.to_owned()).or_default();
                self.statement(table, table_keys)
            })
            .collect();
        Transaction { statements, ending }
    }

    fn statement(&mut self, table: &TableSpec, keys: &mut BTreeSet<i64>) -> String {
        // Weights: insert 4, update by key 3, update by predicate 1, delete by key 2,
        // delete by predicate 1.
        let choice = self.random.random_range(0..11);
        match (choice, table.primary_key.is_some()) {
            (0..=3, _) => self.insert(table, keys),
            (4..=6, true) => self.update_by_key(table, keys),
            (4..=7, _) => self.update_by_predicate(table),
            (8..=9, true) => self.delete_by_key(table, keys),
            _ => self.delete_by_predicate(table),
        }
    }

    fn insert(&mut self, table: &TableSpec, keys: &mut BTreeSet<i64>) -> String {
        let row_count = self
            .random
            .random_range(1..=self.settings.rows_per_insert_max);
        let mut rows: Vec<Vec<String>> = Vec::with_capacity(row_count);
        for _ in 0..row_count {
            let row = match table.primary_key_column() {
                Some(key_column) => {
                    let Some(key) = self.free_key(key_column, keys) else {
                        break;
                    };
                    keys.insert(key);
                    table
                        .columns
                        .iter()
                        .map(|column| {
                            if column.name == key_column.name {
                                key.to_string()
                            } else {
                                self.literal(column)
                            }
                        })
                        .collect()
                }
                None => self.keyless_row(table),
            };
            rows.push(row);
        }
        if rows.is_empty() {
            // Every key is taken: change something instead.
            return self.update_by_predicate(table);
        }
        let columns: Vec<&str> = table.columns.iter().map(|column| column.name).collect();
        let values: Vec<String> = rows
            .iter()
            .map(|row| format!("({})", row.join(", ")))
            .collect();
        format!(
            "INSERT INTO {} ({}) VALUES {}",
            table.name,
            columns.join(", "),
            values.join(", ")
        )
    }

    /// A fresh row, or now and then an exact copy of an earlier one.
    fn keyless_row(&mut self, table: &TableSpec) -> Vec<String> {
        let remembered = self
            .remembered_rows
            .entry(table.name.to_owned())
            .or_default();
        if !remembered.is_empty() && self.random.random_bool(0.3) {
            return remembered
                .choose(&mut self.random)
                .expect("not empty")
                .clone();
        }
        let row: Vec<String> = table
            .columns
            .iter()
            .map(|column| literal(&mut self.random, column, self.settings.null_probability))
            .collect();
        let remembered = self
            .remembered_rows
            .entry(table.name.to_owned())
            .or_default();
        if remembered.len() < REMEMBERED_ROWS_MAX {
            remembered.push(row.clone());
        } else {
            let victim = self.random.random_range(0..remembered.len());
            remembered[victim] = row.clone();
        }
        row
    }

    fn free_key(&mut self, key_column: &ColumnSpec, keys: &BTreeSet<i64>) -> Option<i64> {
        let Values::Integer { min, max } = key_column.values else {
            panic!("primary key {} must have Values::Integer", key_column.name);
        };
        let free: Vec<i64> = (min..=max).filter(|key| !keys.contains(key)).collect();
        free.choose(&mut self.random).copied()
    }

    fn update_by_key(&mut self, table: &TableSpec, keys: &BTreeSet<i64>) -> String {
        let key_column = table.primary_key_column().expect("only for keyed tables");
        let key = self.existing_or_any_key(key_column, keys);
        let assignments = self.assignments(table);
        format!(
            "UPDATE {} SET {} WHERE {} = {key}",
            table.name, assignments, key_column.name
        )
    }

    fn update_by_predicate(&mut self, table: &TableSpec) -> String {
        let assignments = self.assignments(table);
        let predicate = self.predicate(table);
        format!("UPDATE {} SET {assignments} WHERE {predicate}", table.name)
    }

    fn delete_by_key(&mut self, table: &TableSpec, keys: &mut BTreeSet<i64>) -> String {
        let key_column = table.primary_key_column().expect("only for keyed tables");
        let key = self.existing_or_any_key(key_column, keys);
        keys.remove(&key);
        format!(
            "DELETE FROM {} WHERE {} = {key}",
            table.name, key_column.name
        )
    }

    fn delete_by_predicate(&mut self, table: &TableSpec) -> String {
        let predicate = self.predicate(table);
        format!("DELETE FROM {} WHERE {predicate}", table.name)
    }

    /// Mostly a present key; one time in ten any key of the domain (maybe absent: 0 rows).
    fn existing_or_any_key(&mut self, key_column: &ColumnSpec, keys: &BTreeSet<i64>) -> i64 {
        let Values::Integer { min, max } = key_column.values else {
            panic!("primary key {} must have Values::Integer", key_column.name);
        };
        let present: Vec<i64> = keys.iter().copied().collect();
        match present.choose(&mut self.random) {
            Some(key) if self.random.random_bool(0.9) => *key,
            _ => self.random.random_range(min..=max),
        }
    }

    /// `a = 1, b = NULL`, never the key; sometimes `a = a` (a no-op update).
    fn assignments(&mut self, table: &TableSpec) -> String {
        let candidates: Vec<&ColumnSpec> = table
            .columns
            .iter()
            .filter(|column| Some(column.name) != table.primary_key)
            .collect();
        let count = self.random.random_range(1..=candidates.len().min(2));
        let chosen: Vec<&&ColumnSpec> = candidates
            .choose_multiple(&mut self.random, count)
            .collect();
        chosen
            .into_iter()
            .map(|column| {
                if self.random.random_bool(0.1) {
                    format!("{0} = {0}", column.name)
                } else {
                    format!("{} = {}", column.name, self.literal(column))
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `c = v`, `c IS NULL`, or a range on a numeric column.
    fn predicate(&mut self, table: &TableSpec) -> String {
        let column = table
            .columns
            .choose(&mut self.random)
            .expect("a table has columns");
        if column.nullable && self.random.random_bool(0.15) {
            return format!("{} IS NULL", column.name);
        }
        let value = literal(&mut self.random, column, 0.0);
        let numeric = matches!(
            column.values,
            Values::Integer { .. } | Values::Decimal { .. }
        );
        let operator = if numeric && self.random.random_bool(0.4) {
            *["<", ">", "<=", ">="]
                .choose(&mut self.random)
                .expect("not empty")
        } else {
            "="
        };
        format!("{} {operator} {value}", column.name)
    }

    fn literal(&mut self, column: &ColumnSpec) -> String {
        literal(&mut self.random, column, self.settings.null_probability)
    }
}

/// A SQL literal for `column`: NULL with `null_probability` if the column allows it.
pub fn literal(random: &mut StdRng, column: &ColumnSpec, null_probability: f64) -> String {
    if column.nullable && random.random_bool(null_probability) {
        return "NULL".to_owned();
    }
    match &column.values {
        Values::Integer { min, max } => random.random_range(*min..=*max).to_string(),
        Values::Decimal { min, max, scale } => {
            format_scaled(random.random_range(*min..=*max), *scale)
        }
        Values::Text(choices) => {
            let choice = choices.choose(random).expect("Values::Text needs choices");
            format!("'{}'", choice.replace('\'', "''"))
        }
        Values::Timestamp { days } => {
            let seconds = random.random_range(0..i64::from(*days) * 86_400);
            let (day, second_of_day) = (seconds / 86_400, seconds % 86_400);
            // Days counted from 2024-01-01, inside January and February.
            let (month, day_of_month) = if day < 31 {
                (1, day + 1)
            } else {
                (2, day - 30)
            };
            format!(
                "'2024-{month:02}-{day_of_month:02} {:02}:{:02}:{:02}'",
                second_of_day / 3600,
                second_of_day / 60 % 60,
                second_of_day % 60
            )
        }
        Values::Boolean => if random.random_bool(0.5) {
            "TRUE"
        } else {
            "FALSE"
        }
        .to_owned(),
    }
}

/// `12345` at scale 2 → `123.45`; `-5` at scale 2 → `-0.05`.
fn format_scaled(units: i64, scale: u32) -> String {
    if scale == 0 {
        return units.to_string();
    }
    let divisor = 10_i64.pow(scale);
    let sign = if units < 0 { "-" } else { "" };
    let magnitude = units.unsigned_abs();
    let divisor = divisor.unsigned_abs();
    format!(
        "{sign}{}.{:0width$}",
        magnitude / divisor,
        magnitude % divisor,
        width = scale as usize
    )
}

#[cfg(test)]
mod tests {
    //! Goal: literal rendering is exact.

    use super::format_scaled;

    #[test]
    fn scaled_integers_render_as_decimals() {
        assert_eq!(format_scaled(12345, 2), "123.45");
        assert_eq!(format_scaled(-5, 2), "-0.05");
        assert_eq!(format_scaled(100, 2), "1.00");
        assert_eq!(format_scaled(7, 0), "7");
    }
}
