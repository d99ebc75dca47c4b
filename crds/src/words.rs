//! The status-word enums' shape: a `Copy` enum whose values are fixed CamelCase words
//! (condition types and reasons, event reasons), with `as_str`, `parse` and `Display`.

/// Defines a `Copy` enum of status words with `as_str` and `Display`.
macro_rules! status_words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The word as written in status.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value a status word names, if this version knows it.
            pub fn parse(word: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|known| known.as_str() == word)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub(crate) use status_words;
