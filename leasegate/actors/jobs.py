"""Transitional: see leasegate.actors.runtime.periodic."""

from leasegate.actors.runtime.periodic import (
    OVERDUE_INTERVALS as OVERDUE_INTERVALS,
)
from leasegate.actors.runtime.periodic import (
    JobRecord as JobRecord,
)
from leasegate.actors.runtime.periodic import (
    JobStatistics as JobStatistics,
)
from leasegate.actors.runtime.periodic import (
    run_guarded as run_guarded,
)
from leasegate.actors.runtime.periodic import (
    serve_guarded as serve_guarded,
)
