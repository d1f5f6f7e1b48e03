//! What a cache does with the doorkeeper's answer: `admission.mode`.

/// How a storable miss is admitted: `mode` in an `[admission]` table.
///
/// The doorkeeper only answers "seen before?"; the mode says what a cache makes of the answer. A
/// cache without a probation segment (Pingora's admission hook can only defer or admit) treats
/// [`Mode::Probation`] as [`Mode::SecondHit`].
///
/// # Examples
/// ```
/// use bloomgate_admission::Mode;
///
/// assert_eq!(Mode::default(), Mode::Probation);
/// assert_eq!(Mode::SecondHit.as_str(), "second-hit");
/// assert!(!Mode::Off.uses_doorkeeper());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// First seen: stored in a probation segment; seen before: stored in main.
    #[default]
    Probation,
    /// First seen: not stored; seen before: stored in main.
    SecondHit,
    /// Every storable response is stored in main; the doorkeeper is not consulted.
    Off,
}

impl Mode {
    /// Every mode, in the order the configuration documents them.
    pub const ALL: [Mode; 3] = [Mode::Probation, Mode::SecondHit, Mode::Off];

    /// Its name in the configuration file.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Probation => "probation",
            Mode::SecondHit => "second-hit",
            Mode::Off => "off",
        }
    }

    /// Whether this mode asks the doorkeeper.
    pub fn uses_doorkeeper(self) -> bool {
        self != Mode::Off
    }
}
