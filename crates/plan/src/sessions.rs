//! Session windows (`SESSION(table, time_col, gap [, key …])`): the rows of
//! a partition, in time order, form one session while each is less than
//! `gap` after the one before; a session's window is `[first time, last
//! time + gap)`. Both the ad-hoc window function and the incremental
//! operator number sessions with [`session_windows`].

/// The window of each time of `times` (ascending; `None`, a NULL time, has
/// none and breaks no session), as `(window_start, window_end)` in the
/// times' unit.
pub fn session_windows(times: &[Option<i64>], gap: i64) -> Vec<Option<(i64, i64)>> {
    let mut windows = vec![None; times.len()];
    // The rows of the session being read: its first time and its members.
    let mut start: Option<i64> = None;
    let mut last = i64::MIN;
    let mut members: Vec<usize> = Vec::new();
    let mut close = |members: &mut Vec<usize>, start: i64, last: i64| {
        let end = last.saturating_add(gap);
        for member in members.drain(..) {
            windows[member] = Some((start, end));
        }
    };
    for (index, time) in times.iter().enumerate() {
        let Some(time) = *time else { continue };
        match start {
            Some(first) if time.saturating_sub(last) >= gap => {
                close(&mut members, first, last);
                start = Some(time);
            }
            Some(_) => {}
            None => start = Some(time),
        }
        last = time;
        members.push(index);
    }
    if let Some(first) = start {
        close(&mut members, first, last);
    }
    windows
}

#[cfg(test)]
mod tests {
    //! Goal: sessions break where a time is `gap` or more after the one
    //! before, and each row gets its session's first time and last time
    //! plus the gap; NULL times get no window and break nothing.
    use super::*;

    #[test]
    fn sessions_break_at_the_gap() {
        let times = [
            Some(0),
            Some(5),
            None,
            Some(9),
            Some(19),
            Some(19),
            Some(40),
        ];
        assert_eq!(
            session_windows(&times, 10),
            vec![
                Some((0, 19)),
                Some((0, 19)),
                None,
                Some((0, 19)),
                Some((19, 29)),
                Some((19, 29)),
                Some((40, 50)),
            ]
        );
        assert_eq!(session_windows(&[], 10), vec![]);
        assert_eq!(
            session_windows(&[Some(i64::MAX)], 10),
            vec![Some((i64::MAX, i64::MAX))]
        );
    }
}
