//! Max–min fair shares of one limit (water-filling), rounded to whole tokens that never sum
//! above it.

/// Splits `total` tokens among holders that want `wants` (tokens per fill interval; `None`: not
/// known yet, so the holder takes the fair share). A holder wanting less than the fair share gets
/// what it wants, the rest is split evenly among the others, and what is left when everybody
/// wants little is spread evenly, so the shares add up to `total` exactly (after rounding, to
/// `total` or just below, never above).
pub(crate) fn water_fill(total: u64, wants: &[Option<f64>]) -> Vec<u64> {
    if wants.is_empty() {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..wants.len()).collect();
    // Unknown wants sort last: they take whatever level the known ones leave.
    order.sort_by(|&a, &b| {
        let key = |i: usize| wants[i].unwrap_or(f64::INFINITY);
        key(a).total_cmp(&key(b))
    });
    let mut shares = vec![0.0; wants.len()];
    let mut remaining = total as f64;
    let mut left = wants.len();
    for (rank, &i) in order.iter().enumerate() {
        let level = remaining / left as f64;
        let want = wants[i].unwrap_or(f64::INFINITY).max(0.0);
        if want >= level {
            for &j in &order[rank..] {
                shares[j] = level;
            }
            remaining = 0.0;
            break;
        }
        shares[i] = want;
        remaining -= want;
        left -= 1;
    }
    if remaining > 0.0 {
        let extra = remaining / wants.len() as f64;
        shares.iter_mut().for_each(|s| *s += extra);
    }
    round_down(total, &shares)
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
