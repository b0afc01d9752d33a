"""What every package needs, one implementation each: secret redaction (redact), shortening and
comment-stripping of text (text), the owner's time zone and clock (clock), where the config
file is for advice (home), and the Porter stemmer FTS5 uses (porter). Imports nothing of
Pinch's: any package may import it."""
