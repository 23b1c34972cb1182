//! Identifiers. Every id on the wire is a UUID in the 36-character hyphenated form (any case on
//! input, lower case on output). Parsing is the only way to make one, so a value of these types is
//! always valid.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};
use uuid::Uuid;

/// Why a string is not an acceptable id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("must be a UUID in the 8-4-4-4-12 hyphenated form")]
    Malformed,
    #[error("must not be the nil UUID")]
    Nil,
}

/// Parses the hyphenated form only: `Uuid::parse_str` also takes braced, URN and simple forms,
/// which would give one gate several spellings.
fn parse_hyphenated(s: &str) -> Result<Uuid, IdError> {
    if s.len() != 36 {
        return Err(IdError::Malformed);
    }
    Uuid::try_parse(s).map_err(|_| IdError::Malformed)
}

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, nil_allowed = $nil_allowed:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Uuid);

        impl $name {
            /// Parses the hyphenated form (any case).
            pub fn parse(s: &str) -> Result<Self, IdError> {
                Self::from_uuid(parse_hyphenated(s)?)
            }

            /// The id a database column of UUID type holds (refused like `parse` when it may
            /// not be nil).
            pub fn from_uuid(id: Uuid) -> Result<Self, IdError> {
                if !$nil_allowed && id.is_nil() {
                    return Err(IdError::Nil);
                }
                Ok(Self(id))
            }

            /// The UUID itself, for a database column of UUID type.
            pub fn as_uuid(self) -> Uuid {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                // `Uuid`'s Display is the lower-case hyphenated form.
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                Self::parse(&s).map_err(de::Error::custom)
            }
        }
    };
}

macro_rules! minted_id {
    ($(#[$doc:meta])* $name:ident, $mint:expr) => {
        uuid_id!($(#[$doc])* $name, nil_allowed = false);

        impl $name {
            /// A fresh id, minted by the server.
            pub fn mint() -> Self {
                Self($mint)
            }
        }
    };
}

uuid_id!(
    /// A namespace of loops and gates, chosen by the client.
    SessionId, nil_allowed = false
);
uuid_id!(
    /// One agent loop inside a session, chosen by the client.
    LoopId, nil_allowed = false
);
uuid_id!(
    /// The tool call that asked, chosen by the client.
    ToolExecutionId, nil_allowed = false
);
uuid_id!(
    /// Optional correlation id of the agent's turn.
    TurnId, nil_allowed = false
);
uuid_id!(
    /// Optional correlation id of the agent's step.
    StepId, nil_allowed = false
);
minted_id!(
    /// The durable record of one question; minted by the server, never by a client. Random
    /// (version 4): its first eight digits are the short form the CLI shows and takes.
    GateId,
    Uuid::new_v4()
);
minted_id!(
    /// One `ProvideUserInput` command; loops de-duplicate by it. Time-ordered (version 7): its
    /// unique index takes each new command at its right edge, in a page the batch already wrote,
    /// instead of dirtying a random page per answer.
    CommandId,
    Uuid::now_v7()
);
minted_id!(
    /// One journal event.
    EventId,
    Uuid::new_v4()
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_and_lower_case_are_the_same_id() {
        let a = GateId::parse("9D3E4F50-6A7B-4C8D-9E0F-1A2B3C4D5E6F").unwrap();
        let b = GateId::parse("9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6f").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6f");
    }

    #[test]
    fn only_the_hyphenated_form_is_accepted() {
        for bad in [
            "9d3e4f506a7b4c8d9e0f1a2b3c4d5e6f",
            "{9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6f}",
            "urn:uuid:9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6f",
            "9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6",
            "9d3e4f50-6a7b-4c8d-9e0f-1a2b3c4d5e6g",
            "",
        ] {
            assert_eq!(SessionId::parse(bad), Err(IdError::Malformed), "{bad}");
        }
    }

    #[test]
    fn nil_is_refused() {
        let nil = "00000000-0000-0000-0000-000000000000";
        assert_eq!(SessionId::parse(nil), Err(IdError::Nil));
        assert_eq!(LoopId::parse(nil), Err(IdError::Nil));
        assert_eq!(ToolExecutionId::parse(nil), Err(IdError::Nil));
    }
}
