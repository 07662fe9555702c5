//! Whether a call is blocked, from how each of its charges gates it and whether each was admitted.

/// How the denial of one charge affects its call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// A denial blocks the whole call (an ordinary rule).
    Enforced,
    /// The call is blocked only if every quota-mode charge of the call is denied.
    Quota,
    /// A denial never blocks (shadow mode: counted, reported, not enforced).
    Advisory,
}

/// True when the call must be refused: an enforced charge was denied, or the call has quota
/// charges and all of them were denied.
pub fn blocked(outcomes: impl IntoIterator<Item = (Gate, bool)>) -> bool {
    let mut any_quota = false;
    let mut all_quota_denied = true;
    for (gate, admitted) in outcomes {
        match gate {
            Gate::Enforced if !admitted => return true,
            Gate::Quota => {
                any_quota = true;
                all_quota_denied &= !admitted;
            }
            _ => {}
        }
    }
    any_quota && all_quota_denied
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

    /// Quota charges block only when all of them are denied.
    #[test]
    fn quota_blocks_only_when_all_quota_denied() {
        assert!(!blocked([(Gate::Quota, false), (Gate::Quota, true)]));
        assert!(blocked([(Gate::Quota, false), (Gate::Quota, false)]));
        assert!(blocked([(Gate::Quota, false), (Gate::Enforced, true)]));
        assert!(!blocked([(Gate::Quota, true), (Gate::Advisory, false)]));
    }
}
