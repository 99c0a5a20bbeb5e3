"""The device tracker: end users' devices, online, away or gone, and what that does
to their tasks.

A device (a browser page watching its batch) is seen when it heartbeats or
when a submit names it. Device ids are scoped by tenant. States:

- ``online``: seen within ``device_pause_after``;
- ``away``: silent for more than ``device_pause_after``: its batch tasks pause
  (queued → paused; leased and running get ``pause_requested``);
- ``gone``: silent for more than ``device_cancel_after``: its unfinished tasks
  are canceled (queued, paused and unstarted claims at once, settled by
  delivery; running ones get ``cancel_requested``);
- seen again while away or gone: ``online``, and its paused tasks resume
  (``queued``, with their checkpoint).

Transitions run on the tracker's own timer, which wakes exactly at the next
deadline (the least recently seen online device's pause deadline, the least
recently seen away device's cancel deadline). The boundary belongs to the
device: "silent for more than" is strict, so a device seen at exactly
``last_seen + device_pause_after`` stays online and nothing pauses; the timer
fires :data:`TICK` (1 ms) past the boundary.

The table is bounded by ``device_capacity``: a new device evicts the least
recently seen device that has no live task (queued, leased, running, paused,
stale); when none can go, the new device is refused (429, 6008) and, for a
submit, nothing is enqueued (the sighting comes before the submit).

What the tasks go through is the task actor's (``tasks/device_actions.py``); the tracker
reaches it by messages only, and never the other way round. Each device row
carries a ``version`` (its state changes) and ``pending`` (the action of the
current state not yet confirmed). The crash points and what repairs each:

1. Crash before a transition commits: nothing changed; after restart the
   timer finds the same devices past their deadlines (the deadlines are data)
   and the transition happens then. A heartbeat that got no reply is retried
   by the client.
2. Crash after the transition commits (``pending`` = 1), before the task actor
   has applied its action (pause, resume, cancel): on start-up the tracker
   sends the action of every pending device again, at once.
3. Crash after the task actor commits the action, before the tracker records
   it done: the action is sent again on start-up; the task actor's handling is
   idempotent, so nothing changes twice.
4. A lost message in a running process (the task actor's inbox refusing at
   shutdown, a heartbeat's caller gone while it resumed): ``pending`` stays 1;
   the periodic job ``device_presence`` sends the action of every device
   pending for more than :data:`PENDING_GRACE` again.
5. A device changes state again before the first action was delivered (away,
   then back): only the current state's action matters (resume after a pause
   that never came is a no-op). Actions of one device go to the task actor in
   the order the changes were made (one forwarder, first in first out), and a
   newer change replaces an older one still waiting.

Actions the timer causes (away, gone) are delivered by the forwarder (a
service of the system: ``forwarder.Forwarder``). A device that comes back is
resumed by the caller that saw it (``forwarder.see_device``), so the heartbeat's
reply can say how many tasks were put back in line.

Its files, as every actor's: its tag (in the package itself), ``views.py`` (its replies),
``turn.py`` (its turn context and handler registry), ``sightings.py`` (its
messages, each followed by its handler), ``timer.py`` (its transitions and
repair) and ``actor.py`` (how it is opened); ``forwarder.py`` is what carries its
actions to the task actor, outside any turn.
"""

from __future__ import annotations

from typing import TypeAlias

from leasegate.actors.runtime.mailbox import Ref


class Devices:
    """Tags the device tracker's messages (``Ask[Devices, ...]``) and refs."""


DevicesRef: TypeAlias = Ref[Devices]
