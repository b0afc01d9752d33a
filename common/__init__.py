"""What every package needs, one implementation each: secret redaction (redact), shortening and
comment-stripping of text (text), the owner's time zone and clock (clock), and where the config
file is for advice (home). Imports nothing of Pinch's: any package may import it."""
