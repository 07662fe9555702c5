//! Whether a call is blocked, from how each of its charges gates it and whether each was admitted.

/// How the denial of one charge affects its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gate {
    /// A denial blocks the whole call (an ordinary rule).
    Enforced,
    /// A charge of quota-mode descriptor `group` (envoyproxy/ratelimit's `quota_mode`; the
    /// descriptor's index in the call: one group per descriptor, whatever its number of limits).
    /// A quota-mode descriptor is over when any of its charges is denied; the call is blocked
    /// only if every quota-mode descriptor is over.
    QuotaMode(u32),
    /// A denial never blocks (shadow mode: counted, reported, not enforced).
    Advisory,
}

/// True when the call must be refused: an enforced charge was denied, or the call has quota-mode
/// charges and every quota-mode group has a denied charge (envoyproxy/ratelimit's QUOTA_MODE: a
/// call is over when a descriptor not in quota mode is over, or when it has quota-mode
/// descriptors and all are over).
///
/// Allocation-free: the iterator is walked again per admitted quota-mode charge (calls are small).
pub fn blocked<I>(outcomes: I) -> bool
where
    I: IntoIterator<Item = (Gate, bool)>,
    I::IntoIter: Clone,
{
    let outcomes = outcomes.into_iter();
    let mut any_quota_mode = false;
    for (gate, admitted) in outcomes.clone() {
        match gate {
            Gate::Enforced if !admitted => return true,
            Gate::QuotaMode(_) => any_quota_mode = true,
            _ => {}
        }
    }
    any_quota_mode
        && !outcomes.clone().any(|(gate, admitted)| {
            // A group passes when its charges are all admitted (checked from each admitted one).
            admitted
                && matches!(gate, Gate::QuotaMode(_))
                && !outcomes.clone().any(|(g, a)| g == gate && !a)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One denied enforced charge blocks; denied advisory charges never do.
    #[test]
    fn enforced_denial_blocks_and_advisory_does_not() {
        assert!(blocked([(Gate::Enforced, true), (Gate::Enforced, false)]));
        assert!(!blocked([(Gate::Advisory, false), (Gate::Enforced, true)]));
        assert!(!blocked([]));
    }

    /// Quota-mode descriptors block only when all of them are denied.
    #[test]
    fn quota_mode_blocks_only_when_every_quota_mode_descriptor_is_denied() {
        let (q0, q1) = (Gate::QuotaMode(0), Gate::QuotaMode(1));
        assert!(!blocked([(q0, false), (q1, true)]));
        assert!(blocked([(q0, false), (q1, false)]));
        assert!(blocked([(q0, false), (Gate::Enforced, true)]));
        assert!(!blocked([(q0, true), (Gate::Advisory, false)]));
        assert!(blocked([(q0, true), (q1, false), (Gate::Enforced, false)]));
    }

    /// A quota-mode descriptor with several limits is over when any of them is denied, so one
    /// admitted limit of an over descriptor does not let the call through.
    #[test]
    fn a_quota_mode_group_is_over_when_any_of_its_charges_is_denied() {
        let (q0, q1) = (Gate::QuotaMode(0), Gate::QuotaMode(1));
        assert!(blocked([(q0, true), (q0, false)]));
        assert!(blocked([(q0, false), (q0, true), (q1, true), (q1, false)]));
        assert!(!blocked([(q0, true), (q0, false), (q1, true), (q1, true)]));
        assert!(!blocked([(q1, true), (q0, false), (q1, true)]));
    }
}
