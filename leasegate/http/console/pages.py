"""The console's pages (GET): overview, tasks (stale first) and queries, a job's
page, the ledger, workers and devices, API keys."""

from __future__ import annotations

from typing import Any, Literal, TypeVar, get_args

from quart import Response, redirect, request, url_for
from werkzeug.wrappers import Response as Redirect

from leasegate.actors.keys.records import ListKeys
from leasegate.actors.ledger.accounts import GetAccount, ListAccounts, ListEntries
from leasegate.actors.ledger.holds import ListHolds
from leasegate.actors.pages import MAX_OFFSET, Page
from leasegate.actors.queries.reads import CountQueries, ListQueries, ListQuerySites, QueryStatus
from leasegate.actors.queue.activity import Activity
from leasegate.actors.tasks.artifacts import ListArtifacts
from leasegate.actors.tasks.operator import ListSiteControls
from leasegate.actors.tasks.presence import ListSites, ListWorkers
from leasegate.actors.tasks.reads import CountTasks, ListTasks, TaskStatus
from leasegate.errors import InvalidRequest, QueryNotFound, TaskNotFound
from leasegate.http.console.activity import charts, read_activity
from leasegate.http.console.blueprint import bp, page
from leasegate.http.console.operator import BULK_RECLAIM_FIELDS
from leasegate.http.console.search import form_search, message_fields
from leasegate.http.models.jobs import QueryListArgs, SearchArgs, TaskListArgs
from leasegate.http.models.numbers import whole_number
from leasegate.http.routes.admin import health_report
from leasegate.http.server.context import system
from leasegate.http.server.render import to_json
from leasegate.ids import ID_RULE, is_id

TASK_STATUSES: tuple[TaskStatus, ...] = get_args(TaskStatus)
QUERY_STATUSES: tuple[QueryStatus, ...] = get_args(QueryStatus)
PAGE_SIZE = 50
STALE_SHOWN = 20
S = TypeVar("S", bound=SearchArgs)


def _arg_id(name: str) -> str | None:
    """A search field: empty is off; anything else must be an id."""
    value = request.args.get(name, "").strip()
    if not value:
        return None
    if not is_id(value):
        raise InvalidRequest(f"{name} must be {ID_RULE}")
    return value


def _arg_choice(name: str, choices: tuple[str, ...]) -> Any:
    value = request.args.get(name, "").strip()
    if not value:
        return None
    if value not in choices:
        raise InvalidRequest(f"{name} must be one of {', '.join(choices)}")
    return value


def page_offset() -> int:
    found = whole_number(request.args.get("offset", "0"), MAX_OFFSET)
    if found is None:
        raise InvalidRequest(f"offset must be a whole number in digits 0-9, at most "
                             f"{MAX_OFFSET}")
    return found

# The event stream of pages with job rows; a job's page follows that job alone, a
# channel's list that channel (pages without jobs open no stream: each takes one of
# event_max_streams). On an event the page's script re-reads the page's live parts.
ALL_EVENTS = "/v1/events"


def degraded_causes(checks: dict[str, Any]) -> list[str]:
    """Why /health says degraded, in words (empty when it says ok)."""
    def counted(n: int, what: str, plural: str) -> str:
        return f"{n} {what if n == 1 else plural}"

    causes = []
    if not checks["storage_writable"]:
        causes.append("storage not writable")
    if checks["stale_tasks"]:
        causes.append(counted(checks["stale_tasks"], "stale task", "stale tasks"))
    if checks["sites_without_worker"]:
        causes.append(counted(checks["sites_without_worker"], "site without a worker",
                              "sites without a worker"))
    if not checks["ledger_ok"]:
        causes.append("ledger audit failing")
    if checks["overdue_jobs"]:
        causes.append(counted(checks["overdue_jobs"], "periodic job overdue",
                              "periodic jobs overdue"))
    return causes

@bp.get("/")
async def overview() -> Response:
    sys = system()
    report = await health_report(detailed=True)
    # Unfinished work only: counting the finished jobs kept for retention would scan
    # them inside the actors' turns (the charts show what finished lately).
    tasks = dict(await sys.tasks.ask(CountTasks()))
    queries = {"queued": 0, "leased": 0}
    for count in await sys.queries.ask(CountQueries()):
        queries[count.status] += count.n
    workers = await sys.tasks.ask(ListWorkers(Page(limit=100)))
    stale = await sys.tasks.ask(ListTasks(status="stale", page=Page(limit=STALE_SHOWN)))
    audit = sys.last_audit
    now = sys.clock.now()
    activity = await read_activity(sys, now)
    # Every paused or throttled site (the first by name): the controls alone, not the
    # sites page, whose first names may be busy sites that have none.
    controls = (await sys.tasks.ask(ListSiteControls()))[:PAGE_SIZE]
    return await page(
        "overview.html", live=ALL_EVENTS, report=report,
        causes=degraded_causes(report["checks"]), tasks=tasks, queries=queries,
        workers=to_json(workers), stale=to_json(stale), audit=to_json(audit),
        charts=charts(now, *activity), failures=_failures_by_site(*activity),
        controls=to_json(controls))


def _failures_by_site(*channels: Activity) -> list[dict[str, Any]]:
    """Both channels' failures by site, summed, the most first."""
    summed: dict[str, list[int]] = {}
    for activity in channels:
        for f in activity.failures:
            counts = summed.setdefault(f.site, [0, 0, 0, 0])
            for i, n in enumerate((f.failed_hour, f.expired_hour, f.failed_day,
                                   f.expired_day)):
                counts[i] += n
    return [{"site": site, "failed_hour": c[0], "expired_hour": c[1], "failed_day": c[2],
             "expired_day": c[3]}
            for site, c in sorted(summed.items(), key=lambda item: (-sum(item[1]), item[0]))]


async def _searched(model: type[S], channel: Literal["task", "query"],
                    ) -> tuple[S, dict[str, str], Redirect | None]:
    """The page's search (``form_search``), and the redirect to the job's page when it
    is by an id alone that names a job of ``channel``; None when it names none (the id
    is then the start of ids, listed)."""
    args, shown = form_search(model)
    if args.id_prefix is None or not shown.keys() <= {"id"}:
        return args, shown, None
    jobs = system().jobs
    try:
        await (jobs.tasks if channel == "task" else jobs.queries).get(args.id_prefix, None)
    except (TaskNotFound, QueryNotFound):
        return args, shown, None
    job_page: dict[str, Any] = {f"{channel}_id": args.id_prefix}
    return args, shown, redirect(url_for(f"console.{channel}", **job_page), 303)


@bp.get("/tasks")
async def tasks() -> Response | Redirect:
    """Stale tasks first (each with what its last lease left and the reclaim form),
    then a search (``console.search``); an id alone that names a task opens it."""
    args, shown, named = await _searched(TaskListArgs, "task")
    if named is not None:
        return named
    sys = system()
    searched = message_fields(args)
    # The stale tasks the search's other filters match, whatever status it asks for.
    stale = await sys.tasks.ask(ListTasks(status="stale", account=args.account, **{
        **searched, "page": Page(limit=STALE_SHOWN)}))
    artifacts = {task.task_id: to_json((await sys.tasks.ask(
        ListArtifacts(task.task_id))).items) for task in stale.items}
    found = await sys.jobs.tasks.page(ListTasks(
        status=args.status, account=args.account, **searched))
    # The bulk reclaim's form starts from the search's site and account.
    bulk = {name: shown.get(name, "") if name in ("site", "account") else ""
            for name in BULK_RECLAIM_FIELDS}
    return await page("tasks.html", live=f"{ALL_EVENTS}?channel=task", stale=to_json(stale),
                      artifacts=artifacts, found=to_json(found), statuses=TASK_STATUSES,
                      form=shown, bulk=bulk)


@bp.get("/queries")
async def queries() -> Response | Redirect:
    args, shown, named = await _searched(QueryListArgs, "query")
    if named is not None:
        return named
    found = await system().jobs.queries.page(ListQueries(status=args.status,
                                                         **message_fields(args)))
    return await page("queries.html", live=f"{ALL_EVENTS}?channel=query", found=to_json(found),
                      statuses=QUERY_STATUSES, form=shown)


@bp.get("/tasks/<task_id>")
async def task(task_id: str) -> Response:
    if not is_id(task_id):
        raise InvalidRequest(f"task_id must be {ID_RULE}")
    sys = system()
    found = await sys.jobs.tasks.get(task_id, None)
    artifacts = await sys.tasks.ask(ListArtifacts(task_id))
    return await page("job.html", live=f"{ALL_EVENTS}?job_id={task_id}", channel="task",
                      job=to_json(found), job_id=task_id,
                      artifacts=to_json(artifacts.items))


@bp.get("/queries/<query_id>")
async def query(query_id: str) -> Response:
    if not is_id(query_id):
        raise InvalidRequest(f"query_id must be {ID_RULE}")
    found = await system().jobs.queries.get(query_id, None)
    return await page("job.html", live=f"{ALL_EVENTS}?job_id={query_id}", channel="query",
                      job=to_json(found), job_id=query_id,
                      artifacts=[])


@bp.get("/ledger")
async def ledger() -> Response:
    """Accounts and their balances; one account's entries and holds; the credit form."""
    account = _arg_id("account")
    ledger = system().ledger
    accounts = await ledger.ask(ListAccounts(Page(limit=100, offset=page_offset())))
    chosen = entries = None
    holds = await ledger.ask(ListHolds(account=account, page=Page(limit=PAGE_SIZE)))
    if account is not None:
        chosen = to_json(await ledger.ask(GetAccount(account)))
        entries = to_json(await ledger.ask(ListEntries(account, Page(limit=PAGE_SIZE))))
    return await page("ledger.html", accounts=to_json(accounts), account=account or "",
                      chosen=chosen, entries=entries, holds=to_json(holds))


@bp.get("/sites")
async def sites() -> Response:
    """Every site with work, a page at a time, the most first: tasks (which no worker
    serves; ``unserved=1`` keeps those) or, with ``channel=query``, live queries."""
    sys = system()
    channel = _arg_choice("channel", ("task", "query")) or "task"
    unserved = request.args.get("unserved", "") == "1"
    at = Page(limit=PAGE_SIZE, offset=page_offset())
    found = (await sys.tasks.ask(ListSites(at, unserved)) if channel == "task"
             else await sys.queries.ask(ListQuerySites(at)))
    controls = await sys.jobs.sites.page(Page(limit=PAGE_SIZE))  # pause, throttle
    return await page("sites.html", found=to_json(found), channel=channel, unserved=unserved,
                      controls=to_json(controls))


@bp.get("/workers")
async def workers() -> Response:
    """Workers from the task actor; devices from ``GET /v1/devices`` (read by the page's
    script when the gateway has that route)."""
    found = await system().tasks.ask(ListWorkers(Page(limit=PAGE_SIZE,
                                                      offset=page_offset())))
    return await page("workers.html", workers=to_json(found))


@bp.get("/keys")
async def keys() -> Response:
    return await keys_page()


async def keys_page(http_status: int = 200, error: str | None = None,
                    form: Any = None) -> Response:
    """The keys page; with the create form's refusal (``error``) and what was typed in
    it (``form``), to be corrected rather than typed again."""
    found = await system().keys.ask(ListKeys(Page(limit=PAGE_SIZE, offset=page_offset())))
    return await page("keys.html", http_status, keys=to_json(found), error=error,
                      form=form or {})
