//! Event-time bounds (RFC 0013): what the watermarks of tables promise
//! about the values a plan's column can still change at.
//!
//! A [`Bound`] on a column says that every future change of the node's
//! output (an insertion or a retraction) has a value in that column at
//! least the bound, evaluated at the watermarks as they are then. A scan of
//! a watermarked table (append-only, late rows dropped) bounds its time
//! column by the table's watermark; `date_bin`, adding a constant and a
//! union carry bounds on; a grouped aggregate bounds its group columns.
//! Operators use them to forget state that can no longer change (an
//! aggregate's closed windows) and to emit a window once it is final
//! (`EMIT ON WINDOW CLOSE`).

use std::collections::BTreeMap;
use std::fmt;

use rockstream_types::ObjectId;

/// Each watermarked table's watermark (microseconds; UTC for a
/// `timestamptz` column), absent before its first row.
pub type Watermarks = BTreeMap<ObjectId, i64>;

/// A lower bound on a column's future values, as a function of the
/// watermarks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// Table `0`'s watermark.
    Watermark(ObjectId),
    /// `date_bin(stride, of, origin)`: the start of the bin `of` falls in.
    DateBin {
        stride_micros: i64,
        origin_micros: i64,
        of: Box<Bound>,
    },
    /// `of + micros`.
    Plus { micros: i64, of: Box<Bound> },
    /// The least of several (a union's branches).
    Least(Vec<Bound>),
}

impl Bound {
    /// The bound at `watermarks`, in microseconds; `None` while a
    /// watermark it reads is unknown (its table has no row yet), when
    /// nothing is bounded.
    pub fn at(&self, watermarks: &Watermarks) -> Option<i64> {
        match self {
            Bound::Watermark(table) => watermarks.get(table).copied(),
            Bound::DateBin {
                stride_micros,
                origin_micros,
                of,
            } => {
                let value = i128::from(of.at(watermarks)?);
                let (stride, origin) = (i128::from(*stride_micros), i128::from(*origin_micros));
                let binned = origin + (value - origin).div_euclid(stride) * stride;
                Some(saturate(binned))
            }
            Bound::Plus { micros, of } => Some(of.at(watermarks)?.saturating_add(*micros)),
            Bound::Least(bounds) => bounds
                .iter()
                .map(|bound| bound.at(watermarks))
                .collect::<Option<Vec<i64>>>()?
                .into_iter()
                .min(),
        }
    }

    /// The tables whose watermarks it reads.
    pub fn tables(&self) -> Vec<ObjectId> {
        match self {
            Bound::Watermark(table) => vec![*table],
            Bound::DateBin { of, .. } | Bound::Plus { of, .. } => of.tables(),
            Bound::Least(bounds) => bounds.iter().flat_map(Bound::tables).collect(),
        }
    }
}

fn saturate(value: i128) -> i64 {
    i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX })
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bound::Watermark(table) => write!(f, "watermark({table})"),
            Bound::DateBin {
                stride_micros,
                origin_micros,
                of,
            } => write!(f, "date_bin({stride_micros} µs, {of}, {origin_micros})"),
            Bound::Plus { micros, of } => write!(f, "{of} + {micros} µs"),
            Bound::Least(bounds) => {
                let bounds: Vec<String> = bounds.iter().map(ToString::to_string).collect();
                write!(f, "least({})", bounds.join(", "))
            }
        }
    }
}

/// A grouped aggregate's promise that groups whose `column` (a group
/// column) is below `bound` never change again: their state is deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retirement {
    pub column: usize,
    pub bound: Bound,
}

#[cfg(test)]
mod tests {
    //! Goal: a bound evaluates as the expression it stands for, at the
    //! watermarks given, and is unknown while a watermark is.
    use super::*;

    #[test]
    fn bounds_evaluate_as_their_expressions() {
        let watermarks = Watermarks::from([(1, 125), (2, -5)]);
        let bin = |of| Bound::DateBin {
            stride_micros: 60,
            origin_micros: 0,
            of: Box::new(of),
        };
        assert_eq!(bin(Bound::Watermark(1)).at(&watermarks), Some(120));
        // Bins before the origin start below the value, as date_bin's do.
        assert_eq!(bin(Bound::Watermark(2)).at(&watermarks), Some(-60));
        let end = Bound::Plus {
            micros: 60,
            of: Box::new(bin(Bound::Watermark(1))),
        };
        assert_eq!(end.at(&watermarks), Some(180));
        let least = Bound::Least(vec![end, Bound::Watermark(2)]);
        assert_eq!(least.at(&watermarks), Some(-5));
        assert_eq!(least.tables(), vec![1, 2]);
        assert_eq!(Bound::Watermark(3).at(&watermarks), None);
        assert_eq!(
            Bound::Least(vec![Bound::Watermark(1), Bound::Watermark(3)]).at(&watermarks),
            None
        );
    }
}
