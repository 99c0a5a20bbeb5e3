"""DryFilters: within a turn, a sites filter that found no work finds none again."""

from leasegate.actors.queue.leases import DryFilters


def test_dry_within_a_turn_only() -> None:
    dry = DryFilters()
    assert not dry.known(1, ("a",))
    dry.add(1, ("a", "b"))
    assert dry.known(1, ("a", "b")) and dry.known(1, ("a",)) and dry.known(1, ("b", "a"))
    assert not dry.known(1, ("a", "c")) and not dry.known(1, None)
    assert not dry.known(2, ("a",))  # a new turn forgets


def test_no_work_anywhere_means_no_work_for_any_filter() -> None:
    dry = DryFilters()
    dry.add(7, None)
    assert dry.known(7, ("x",)) and dry.known(7, None)
