//! MAX_TILES for vision-language models (docs/planning.md).

/// The tile ladder, largest first; an out-of-memory retry moves one step down.
pub const TILE_LADDER: [u32; 6] = [32, 18, 14, 12, 8, 6];

/// MAX_TILES from VRAM per GPU: 32 at 80 GiB and above, 18 at 24 GiB, 14 at 16 GiB, 12 below.
///
/// NVML reports less than the marketing size (a 24 GB A10G shows 23028 MiB, a 16 GB T4
/// 15360 MiB), so a step counts as reached at 90% of its size.
pub fn max_tiles_for_vram(memory_mib: u64) -> u32 {
    // Saturating: a reading past u64 / 10 reaches every step, as it should.
    let reaches = |gib: u64| memory_mib.saturating_mul(10) >= gib.saturating_mul(1024 * 9);
    if reaches(80) {
        32
    } else if reaches(24) {
        18
    } else if reaches(16) {
        14
    } else {
        12
    }
}

/// Where the teams' rollback takes image tiles after an out-of-memory failure ("conservative").
pub const CONSERVATIVE_TILES: u32 = 12;

/// MAX_TILES after `steps` out-of-memory tile steps: the first goes straight to
/// [`CONSERVATIVE_TILES`] (never up).
pub fn rolled_back(tiles: u32, steps: u32) -> u32 {
    if steps == 0 {
        tiles
    } else {
        tiles.min(CONSERVATIVE_TILES)
    }
}

/// `steps` rungs below `tiles` on the ladder (never below its last rung).
pub fn step_down(tiles: u32, steps: u32) -> u32 {
    if steps == 0 {
        return tiles;
    }
    let last = TILE_LADDER.len().saturating_sub(1);
    let Some(start) = TILE_LADDER.iter().position(|&t| t <= tiles) else {
        return tiles; // already below the ladder
    };
    // A value between rungs: its first step is the rung just below it.
    let on_ladder = TILE_LADDER[start] == tiles;
    // `steps` is read back from status: saturate rather than trust it.
    let steps = usize::try_from(steps).unwrap_or(usize::MAX);
    let index = start
        .saturating_add(steps)
        .saturating_sub(usize::from(!on_ladder));
    TILE_LADDER[index.min(last)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_follow_nvml_reported_memory() {
        assert_eq!(max_tiles_for_vram(15_360), 14, "T4 16 GB");
        assert_eq!(max_tiles_for_vram(16_160), 14, "V100 16 GB");
        assert_eq!(max_tiles_for_vram(23_028), 18, "A10G 24 GB");
        assert_eq!(max_tiles_for_vram(46_068), 18, "L40S 48 GB");
        assert_eq!(max_tiles_for_vram(81_559), 32, "H100 80 GB");
        assert_eq!(max_tiles_for_vram(143_771), 32, "H200");
        assert_eq!(max_tiles_for_vram(12_288), 12, "12 GB card");
        assert_eq!(max_tiles_for_vram(20_470), 14, "20 GB card");
    }

    #[test]
    fn the_rollback_goes_to_12_and_never_up() {
        assert_eq!(rolled_back(32, 0), 32);
        assert_eq!(rolled_back(32, 1), 12);
        assert_eq!(rolled_back(18, 1), 12);
        assert_eq!(rolled_back(8, 1), 8);
    }

    #[test]
    fn stepping_down_moves_one_rung_and_stops_at_the_bottom() {
        assert_eq!(step_down(18, 0), 18);
        assert_eq!(step_down(18, 1), 14);
        assert_eq!(step_down(32, 2), 14);
        assert_eq!(step_down(6, 3), 6);
        assert_eq!(
            step_down(20, 1),
            18,
            "a custom value steps to the rung below it"
        );
        assert_eq!(step_down(4, 1), 4, "below the ladder stays put");
    }
}
