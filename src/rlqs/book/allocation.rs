//! Max–min fair shares of one limit (water-filling), rounded to whole tokens that never sum
//! above it.

/// Splits `total` tokens among holders that want `wants` (tokens per fill interval; `None`: not
/// known yet, so the holder takes the fair share). A holder wanting less than the fair share gets
/// what it wants, the rest is split evenly among the others, and what is left when everybody
/// wants little is spread evenly, so the shares add up to `total` exactly (after rounding, to
/// `total` or just below, never above).
pub(crate) fn water_fill(total: u64, wants: &[Option<f64>]) -> Vec<u64> {
    let water = water_level(total, wants);
    let shares: Vec<f64> = wants.iter().map(|&w| water.fill(w)).collect();
    round_down(total, &shares)
}

/// The level a water-fill reaches: every holder gets its want up to `level`, plus `extra`
/// (what is left, spread evenly, when every want is below the level). Kept by a bucket so a
/// report can be given its share without another fill over every holder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Water {
    /// Tokens a holder wanting more gets (infinite when every want is met).
    pub level: f64,
    /// Tokens added to every share (the leftover when every want is met).
    pub extra: f64,
}

impl Water {
    /// The (fractional) share of a holder wanting `want` (`None`: not known, the level).
    pub(crate) fn fill(self, want: Option<f64>) -> f64 {
        let want = want.unwrap_or(f64::INFINITY).max(0.0);
        want.min(self.level) + self.extra
    }
}

/// The water level of `total` tokens among `wants` (see [`water_fill`]): one sort of the wants.
pub(crate) fn water_level(total: u64, wants: &[Option<f64>]) -> Water {
    if wants.is_empty() {
        return Water {
            level: f64::INFINITY,
            extra: 0.0,
        };
    }
    // Unknown wants sort last: they take whatever level the known ones leave.
    let mut sorted: Vec<f64> = (wants.iter())
        .map(|w| w.unwrap_or(f64::INFINITY).max(0.0))
        .collect();
    sorted.sort_unstable_by(f64::total_cmp);
    let mut remaining = total as f64;
    let mut left = sorted.len();
    for want in sorted {
        let level = remaining / left as f64;
        if want >= level {
            return Water { level, extra: 0.0 };
        }
        remaining -= want;
        left -= 1;
    }
    Water {
        level: f64::INFINITY,
        extra: remaining.max(0.0) / wants.len() as f64,
    }
}

/// Splits `total` in proportion to `weights`, each positive weight getting at least 1 while
/// `total` allows (the largest weights first), never summing above `total`.
pub(crate) fn proportional(total: u64, weights: &[u64]) -> Vec<u64> {
    let mut positive: Vec<usize> = (0..weights.len()).filter(|&i| weights[i] > 0).collect();
    positive.sort_by_key(|&i| std::cmp::Reverse(weights[i]));
    if (positive.len() as u64) > total {
        // Not even one each: the largest holders get one, the rest none.
        let mut out = vec![0u64; weights.len()];
        for &i in positive.iter().take(total as usize) {
            out[i] = 1;
        }
        return out;
    }
    let sum: u128 = weights.iter().map(|&w| w as u128).sum();
    if sum == 0 {
        return vec![0; weights.len()];
    }
    let exact: Vec<f64> = weights
        .iter()
        .map(|&w| (total as u128 * w as u128) as f64 / sum as f64)
        .collect();
    let mut out = round_down(total, &exact);
    // A positive weight rounded to nothing takes one from the largest share.
    let starved: Vec<usize> = positive.iter().copied().filter(|&i| out[i] == 0).collect();
    for i in starved {
        let largest = (0..out.len())
            .filter(|&j| out[j] > 1)
            .max_by_key(|&j| out[j]);
        if let Some(top) = largest {
            out[top] -= 1;
            out[i] = 1;
        }
    }
    out
}

/// Whole shares from fractional ones summing to about `total`: each share's floor, then one
/// more to the largest remainders while the sum stays at or below `total` (largest remainder
/// method; the floors alone never exceed it, so neither does the result).
fn round_down(total: u64, exact: &[f64]) -> Vec<u64> {
    let mut whole: Vec<u64> = exact.iter().map(|&x| x.max(0.0).floor() as u64).collect();
    let mut sum: u64 = whole.iter().sum();
    // Floating error could push a floor one above its true value; take it back.
    let mut i = 0;
    while sum > total {
        if whole[i] > 0 {
            whole[i] -= 1;
            sum -= 1;
        }
        i = (i + 1) % whole.len();
    }
    let mut order: Vec<usize> = (0..exact.len()).collect();
    order.sort_by(|&a, &b| {
        let frac = |i: usize| exact[i] - exact[i].floor();
        frac(b).total_cmp(&frac(a)).then(a.cmp(&b))
    });
    for &i in order.iter().cycle().take(exact.len()) {
        if sum >= total {
            break;
        }
        whole[i] += 1;
        sum += 1;
    }
    whole
}

#[cfg(test)]
mod tests;
