"""The analysis' defaults, in one place: ``Params`` (``nsysan.result``), ``RunOptions``
(``nsysan.options``) and the command line's options (``nsysan.cli.parser``) read them."""

MIN_GAP_NS = 10_000  # the smallest GPU idle gap reported (--min-gap-us)
WARMUP_FACTOR = 1.5  # leading iterations slower than this times the median are warm-up (--warmup-factor)
MAX_EVENTS = 200_000_000  # a trace with more events is refused (--max-events)
