//! Software verbs provider (in process).
