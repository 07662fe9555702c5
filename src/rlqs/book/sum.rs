//! A sum of shares, kept as holders change so that fitting one share needs no walk over all.

use super::share::{Grid, Share};

/// Both parts of a sum of shares, wide enough that `ALLOW_ALL` holders never wrap it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Sum {
    pub tokens: u128,
    pub burst: u128,
}

impl Sum {
    pub(crate) fn add(&mut self, s: Share) {
        self.tokens += s.tokens as u128;
        self.burst += s.burst as u128;
    }

    /// Takes back a share this sum counted (so never below zero; saturating all the same, as a
    /// sum that wrapped would hand out the whole limit again).
    pub(crate) fn sub(&mut self, s: Share) {
        debug_assert!(self.tokens >= s.tokens as u128 && self.burst >= s.burst as u128);
        self.tokens = self.tokens.saturating_sub(s.tokens as u128);
        self.burst = self.burst.saturating_sub(s.burst as u128);
    }

    /// What is left of `grid` once this sum is taken (zero when over).
    pub(crate) fn room(self, grid: Grid) -> Share {
        let left = |total: u64, used: u128| (total as u128).saturating_sub(used) as u64;
        Share {
            tokens: left(grid.tokens, self.tokens),
            burst: left(grid.burst, self.burst),
        }
    }
}
