//! Which sessions `dsh session prune` removes: every one last used before a cutoff, except the
//! most recently used ones it is told to keep.

/// The positions in `last_used` (epoch milliseconds, in any order) of the sessions to remove:
/// those used before `cutoff_ms`, once the `keep` most recently used are set aside.
pub fn to_remove(last_used: &[f64], cutoff_ms: f64, keep: usize) -> Vec<usize> {
    let mut newest_first: Vec<usize> = (0..last_used.len()).collect();
    newest_first.sort_by(|a, b| last_used[*b].total_cmp(&last_used[*a]).then(a.cmp(b)));
    newest_first.into_iter().skip(keep).filter(|at| last_used[*at] < cutoff_ms).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sessions_used_before_the_cutoff_go_except_the_newest_kept() {
        let used = [50.0, 10.0, 30.0, 70.0];
        assert_eq!(to_remove(&used, 40.0, 0), [2, 1]);
        assert_eq!(to_remove(&used, 40.0, 3), [1]);
        assert_eq!(to_remove(&used, 40.0, 4), Vec::<usize>::new());
        assert_eq!(to_remove(&used, 5.0, 0), Vec::<usize>::new());
    }

    proptest! {
        #[test]
        fn nothing_used_since_the_cutoff_and_none_of_the_newest_kept_is_removed(
            used in prop::collection::vec(0.0..1e6f64, 0..40),
            cutoff in 0.0..1e6f64,
            keep in 0usize..50,
        ) {
            let removed = to_remove(&used, cutoff, keep);
            for at in &removed {
                prop_assert!(used[*at] < cutoff);
                let as_new = used.iter().enumerate().filter(|(other, when)| other != at && **when >= used[*at]).count();
                prop_assert!(as_new >= keep, "one of the {} newest was removed", keep);
            }
            let old = used.iter().filter(|at| **at < cutoff).count();
            prop_assert!(removed.len() >= old.saturating_sub(keep) && removed.len() <= old);
        }
    }
}
