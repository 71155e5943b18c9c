"""Raw RFC 5322 bytes -> AECS-1 NormalizedEmail (being built; see issue 3)."""
