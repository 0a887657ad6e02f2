//! Logical times and frontiers (DESIGN §8.1–8.2).
//!
//! A [`Timestamp`] is a pair `(epoch, iteration)` under the *product*
//! partial order: `a ≤ b` iff `a.epoch ≤ b.epoch` and `a.iteration ≤
//! b.iteration`. Outside recursive scopes the iteration is 0 and the order is
//! the epochs' total order.
//!
//! An [`Antichain`] is a set of mutually incomparable timestamps. As a
//! *frontier* it stands for every time greater than or equal to one of its
//! elements: the times at which changes may still arrive. The empty
//! antichain is the frontier of a closed stream (nothing more will come).
//!
//! Laws kept (and property-tested below):
//! - an antichain never holds two comparable elements, whatever is inserted;
//! - [`Antichain::meet`] is the greatest lower bound of two frontiers: a time
//!   is beyond the meet iff it is beyond either operand;
//! - [`Antichain::advance_to`] only ever moves a frontier forward: the new
//!   frontier must be beyond the old one, or it is refused.

use std::fmt;

/// A logical time: the epoch that committed a change, and the iteration of
/// a recursive scope that derived it (0 outside recursion).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Timestamp {
    pub epoch: u64,
    pub iteration: u32,
}

impl Timestamp {
    pub const fn new(epoch: u64, iteration: u32) -> Self {
        Timestamp { epoch, iteration }
    }

    /// The time of epoch `epoch` outside recursion.
    pub const fn epoch(epoch: u64) -> Self {
        Timestamp::new(epoch, 0)
    }

    /// `self ≤ other` in the product order.
    pub fn less_equal(&self, other: &Timestamp) -> bool {
        self.epoch <= other.epoch && self.iteration <= other.iteration
    }

    /// The least time beyond both (componentwise maximum).
    pub fn join(&self, other: &Timestamp) -> Timestamp {
        Timestamp::new(
            self.epoch.max(other.epoch),
            self.iteration.max(other.iteration),
        )
    }

    /// The greatest time below both (componentwise minimum).
    pub fn meet(&self, other: &Timestamp) -> Timestamp {
        Timestamp::new(
            self.epoch.min(other.epoch),
            self.iteration.min(other.iteration),
        )
    }

    /// Fixed-width big-endian bytes: their byte order is the epochs' order
    /// first, then the iterations' (a total order extending the product
    /// order), so stored times sort as times.
    pub fn to_be_bytes(&self) -> [u8; 12] {
        let mut bytes = [0; 12];
        bytes[..8].copy_from_slice(&self.epoch.to_be_bytes());
        bytes[8..].copy_from_slice(&self.iteration.to_be_bytes());
        bytes
    }

    pub fn from_be_bytes(bytes: [u8; 12]) -> Self {
        let mut epoch = [0; 8];
        epoch.copy_from_slice(&bytes[..8]);
        let mut iteration = [0; 4];
        iteration.copy_from_slice(&bytes[8..]);
        Timestamp::new(u64::from_be_bytes(epoch), u32::from_be_bytes(iteration))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.iteration == 0 {
            write!(f, "{}", self.epoch)
        } else {
            write!(f, "({}, {})", self.epoch, self.iteration)
        }
    }
}

/// A set of mutually incomparable timestamps; as a frontier, the lower
/// boundary of the times still to come. Kept sorted, so equal antichains
/// compare equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Antichain {
    elements: Vec<Timestamp>,
}

/// A frontier update that would move a frontier backwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontierRegression {
    pub from: Antichain,
    pub to: Antichain,
}

impl fmt::Display for FrontierRegression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "frontier would regress from {} to {}",
            self.from, self.to
        )
    }
}

impl std::error::Error for FrontierRegression {}

impl Antichain {
    /// The frontier of a closed stream: no time is beyond it.
    pub fn empty() -> Self {
        Antichain::default()
    }

    /// The frontier of one time.
    pub fn from_elem(time: Timestamp) -> Self {
        Antichain {
            elements: vec![time],
        }
    }

    /// The minimal elements of `times`.
    pub fn from_times(times: impl IntoIterator<Item = Timestamp>) -> Self {
        let mut antichain = Antichain::empty();
        for time in times {
            antichain.insert(time);
        }
        antichain
    }

    pub fn elements(&self) -> &[Timestamp] {
        &self.elements
    }

    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// Adds `time` unless an element is already at or below it; drops the
    /// elements above it. Returns whether the antichain changed.
    pub fn insert(&mut self, time: Timestamp) -> bool {
        if self
            .elements
            .iter()
            .any(|element| element.less_equal(&time))
        {
            return false;
        }
        self.elements.retain(|element| !time.less_equal(element));
        let at = self.elements.partition_point(|element| {
            (element.epoch, element.iteration) < (time.epoch, time.iteration)
        });
        self.elements.insert(at, time);
        true
    }

    /// True when `time` is at or beyond some element: a change at `time`
    /// may still arrive.
    pub fn less_equal(&self, time: &Timestamp) -> bool {
        self.elements.iter().any(|element| element.less_equal(time))
    }

    /// True when every time beyond `other` is beyond `self`: `self` is at
    /// or behind `other`.
    pub fn dominates(&self, other: &Antichain) -> bool {
        other.elements.iter().all(|time| self.less_equal(time))
    }

    /// The greatest lower bound of two frontiers: the times beyond either.
    /// What a reader of two inputs may assume complete.
    pub fn meet(&self, other: &Antichain) -> Antichain {
        Antichain::from_times(self.elements.iter().chain(&other.elements).copied())
    }

    /// Moves the frontier to `to`, which must not be behind it.
    pub fn advance_to(&mut self, to: Antichain) -> Result<(), FrontierRegression> {
        if !self.dominates(&to) {
            return Err(FrontierRegression {
                from: self.clone(),
                to,
            });
        }
        *self = to;
        Ok(())
    }
}

impl fmt::Display for Antichain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{")?;
        for (index, element) in self.elements.iter().enumerate() {
            if index > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{element}")?;
        }
        write!(f, "}}")
    }
}

#[cfg(test)]
mod tests {
    //! Goal: the timestamp and antichain laws the frontier protocol relies
    //! on. Method: properties over small random times (so that comparable
    //! and incomparable pairs are both common), plus a few worked cases.
    use proptest::prelude::*;

    use super::*;

    fn time() -> impl Strategy<Value = Timestamp> {
        (0u64..6, 0u32..6).prop_map(|(epoch, iteration)| Timestamp::new(epoch, iteration))
    }

    fn times() -> impl Strategy<Value = Vec<Timestamp>> {
        proptest::collection::vec(time(), 0..8)
    }

    proptest! {
        #[test]
        fn an_antichain_never_holds_comparable_elements(times in times()) {
            let antichain = Antichain::from_times(times.iter().copied());
            for (i, a) in antichain.elements().iter().enumerate() {
                for b in &antichain.elements()[i + 1..] {
                    prop_assert!(!a.less_equal(b) && !b.less_equal(a), "{a} and {b}");
                }
            }
            // It stands for exactly the times beyond one of the inputs.
            for probe in times.iter().chain(&[Timestamp::new(3, 3)]) {
                let beyond_input = times.iter().any(|t| t.less_equal(probe));
                prop_assert_eq!(antichain.less_equal(probe), beyond_input);
            }
        }

        #[test]
        fn meet_is_beyond_iff_either_is(a in times(), b in times(), probe in time()) {
            let a = Antichain::from_times(a);
            let b = Antichain::from_times(b);
            let meet = a.meet(&b);
            prop_assert_eq!(meet.less_equal(&probe), a.less_equal(&probe) || b.less_equal(&probe));
            prop_assert!(meet.dominates(&a) && meet.dominates(&b));
            prop_assert_eq!(meet, b.meet(&a));
        }

        #[test]
        fn insertion_order_does_not_matter(mut times in times()) {
            let forward = Antichain::from_times(times.iter().copied());
            times.reverse();
            prop_assert_eq!(forward, Antichain::from_times(times));
        }

        #[test]
        fn frontiers_only_advance(a in times(), b in times()) {
            let a = Antichain::from_times(a);
            let b = Antichain::from_times(b);
            let mut moved = a.clone();
            match moved.advance_to(b.clone()) {
                Ok(()) => prop_assert!(a.dominates(&b)),
                Err(regression) => {
                    prop_assert!(!a.dominates(&b));
                    prop_assert_eq!(regression.from, a.clone());
                    prop_assert_eq!(moved, a);
                }
            }
        }

        #[test]
        fn byte_order_extends_the_product_order(a in time(), b in time()) {
            prop_assert_eq!(Timestamp::from_be_bytes(a.to_be_bytes()), a);
            if a.less_equal(&b) {
                prop_assert!(a.to_be_bytes() <= b.to_be_bytes());
            }
        }

        #[test]
        fn join_and_meet_bound_both(a in time(), b in time()) {
            prop_assert!(a.less_equal(&a.join(&b)) && b.less_equal(&a.join(&b)));
            prop_assert!(a.meet(&b).less_equal(&a) && a.meet(&b).less_equal(&b));
        }
    }

    #[test]
    fn worked_cases() {
        let mut frontier = Antichain::from_elem(Timestamp::epoch(3));
        assert!(frontier.less_equal(&Timestamp::epoch(3)));
        assert!(!frontier.less_equal(&Timestamp::epoch(2)));
        // Incomparable times coexist: (4, 0) and (3, 2).
        let mixed = Antichain::from_times([Timestamp::new(4, 0), Timestamp::new(3, 2)]);
        assert_eq!(mixed.elements().len(), 2);
        assert_eq!(mixed.to_string(), "{(3, 2), 4}");
        assert!(frontier.advance_to(mixed.clone()).is_ok());
        assert!(frontier
            .advance_to(Antichain::from_elem(Timestamp::epoch(1)))
            .is_err());
        assert!(frontier.advance_to(Antichain::empty()).is_ok());
        assert!(!frontier.less_equal(&Timestamp::epoch(u64::MAX)));
    }
}
