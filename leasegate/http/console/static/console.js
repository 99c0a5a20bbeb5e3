// The console's live parts. Pages are rendered by the server; this script
//  - shows an error on the form it refused, with the values sent (data-refused),
//  - switches the theme (the header's toggle; theme.js applies it before painting),
//  - follows the job event stream: a row's status changes at once, and the page's
//    live parts ([data-live]) are read again from the server, at most one read at a
//    time and one a second (a flood of events costs one read a second, not one an
//    event), keeping what the operator is typing in a form,
//  - reads histories and devices from the gateway.
// The routes are named by the body's data-* attributes, set only for a signed-in
// page. Without this script the pages are whole and correct; a reload updates them.
(function () {
  "use strict";
  var body = document.body;
  var LOG_ITEMS = 20;
  var FIRST_READ_MS = 250; // a burst of events comes as one read
  var MIN_GAP_MS = 1000; // between the end of one read and the start of the next

  // ---- one date format, the CLI's: 2026-11-30 08:00:00 UTC (as the server writes it) ----

  function utcText(iso) { return String(iso).replace("T", " ").replace("Z", "") + " UTC"; }

  function timeOf(iso) {
    var time = document.createElement("time");
    time.dateTime = iso;
    time.textContent = utcText(iso);
    return time;
  }

  // ---- the theme: the OS's, or the one the operator chose (remembered) ----

  var THEME_KEY = "leasegate-theme";

  function darkNow() {
    var chosen = document.documentElement.getAttribute("data-theme");
    if (chosen) { return chosen === "dark"; }
    return window.matchMedia("(prefers-color-scheme: dark)").matches;
  }

  function setUpThemeToggle() {
    var toggle = document.getElementById("theme-toggle");
    if (!toggle) { return; }
    var label = function () {
      toggle.textContent = darkNow() ? "Light mode" : "Dark mode";
      toggle.setAttribute("aria-pressed", darkNow() ? "true" : "false");
    };
    toggle.addEventListener("click", function () {
      var next = darkNow() ? "light" : "dark";
      document.documentElement.setAttribute("data-theme", next);
      try { window.localStorage.setItem(THEME_KEY, next); } catch (e) { /* not kept */ }
      label();
    });
    label();
    toggle.hidden = false;
  }

  // ---- a refused form, shown again with its error and the values sent ----

  function showRefused() {
    var text = body.getAttribute("data-refused");
    if (!text) { return; }
    var refused;
    try { refused = JSON.parse(text); } catch (e) { return; }
    var form = Array.prototype.filter.call(document.querySelectorAll("form[method=post]"),
      function (f) { // the attribute: a field named "action" hides the form's property
        return new URL(f.getAttribute("action") || "", window.location.href).pathname === refused.action;
      })[0];
    if (!form) { return; } // the notice above says it
    var details = form.closest("details");
    if (details) { details.open = true; }
    var values = refused.values || {};
    Array.prototype.forEach.call(form.elements, function (field) {
      if (!field.name || !values.hasOwnProperty(field.name) || field.name === "csrf") { return; }
      if (field.type === "radio" || field.type === "checkbox") {
        field.checked = field.value === values[field.name];
      } else if (field.type !== "hidden" && field.type !== "submit") {
        field.value = values[field.name];
      }
    });
    var error = document.createElement("p");
    error.className = "notice notice-error form-error";
    error.setAttribute("role", "alert");
    error.textContent = refused.message;
    form.insertBefore(error, form.firstChild);
    document.querySelectorAll("main > .notice-error").forEach(function (notice) {
      if (notice.textContent.trim() === refused.message) { notice.remove(); } // said once
    });
    var first = Array.prototype.filter.call(form.elements, function (f) {
      return f.name && f.type !== "hidden" && f.name in values;
    })[0];
    if (first) { first.focus(); }
  }

  // ---- rows that change at once ----

  function rowsOf(channel, jobId) {
    var found = [];
    document.querySelectorAll("[data-job-id]").forEach(function (el) {
      if (el.getAttribute("data-job-id") === jobId && el.getAttribute("data-channel") === channel) {
        found.push(el);
      }
    });
    return found;
  }

  function flash(el) {
    el.classList.remove("flash");
    void el.offsetWidth; // restart the animation
    el.classList.add("flash");
  }

  function setStatus(el, status) {
    var cell = el.querySelector(".status");
    if (!cell || cell.textContent === status) { return; }
    cell.textContent = status;
    cell.className = "status s-" + status.replace(/[^a-z_]/g, "");
    el.setAttribute("data-status", status);
    flash(el);
  }

  function logEvent(ev) {
    var log = document.getElementById("live-log");
    if (!log) { return; }
    var muted = log.querySelector(".muted");
    if (muted) { muted.remove(); }
    var item = document.createElement("li");
    var link = document.createElement("a");
    link.href = "/console/" + (ev.channel === "task" ? "tasks/" : "queries/") +
      encodeURIComponent(ev.job_id);
    link.textContent = ev.job_id;
    item.appendChild(timeOf(ev.at));
    item.appendChild(document.createTextNode(" " + ev.channel + " "));
    item.appendChild(link);
    item.appendChild(document.createTextNode(" " + ev.kind + " → " + ev.status));
    log.insertBefore(item, log.firstChild);
    while (log.children.length > LOG_ITEMS) { log.removeChild(log.lastChild); }
  }

  function showLiveState(text) {
    var state = document.getElementById("live-state");
    if (!state) { return; }
    state.textContent = text;
    state.hidden = !text;
  }

  // ---- the live parts, read again ----

  var reading = {timer: null, busy: false, wanted: false, last: 0, gap: MIN_GAP_MS};
  var served = {}; // each live part's HTML as last served (what a new reading is compared to)
  // Jobs with events since the last reading (everyJob: missed events): their histories
  // are read again after it, once, however many events came.
  var eventsOf = {};
  var everyJob = false;

  function readSoon() {
    if (!document.querySelector("[data-live]")) { return; }
    reading.wanted = true;
    if (reading.timer !== null || reading.busy) { return; }
    var wait = Math.max(FIRST_READ_MS, reading.last + reading.gap - Date.now());
    reading.timer = setTimeout(readNow, wait);
  }

  function readNow() {
    reading.timer = null;
    reading.wanted = false;
    reading.busy = true;
    var started = Date.now();
    var jobs = eventsOf;
    var all = everyJob;
    eventsOf = {};
    everyJob = false;
    var done = function () {
      document.querySelectorAll("[data-history]").forEach(function (section) {
        if (all || jobs.hasOwnProperty(section.getAttribute("data-job"))) { loadHistory(section); }
      });
      reading.busy = false;
      reading.last = Date.now();
      reading.gap = Math.max(MIN_GAP_MS, 4 * (reading.last - started)); // a slow server: less often
      if (reading.wanted) { readSoon(); }
    };
    fetch(window.location.href, {credentials: "same-origin", headers: {"X-Console-Refresh": "1"}})
      .then(function (response) {
        if (response.redirected) { throw new Error("signed out: reload the page to sign in again"); }
        if (!response.ok) { throw new Error("this page could not be read again (" + response.status + "): reload it"); }
        return response.text();
      })
      .then(function (html) {
        swapLiveParts(new DOMParser().parseFromString(html, "text/html"));
        showLiveState("");
        done();
      }, function (error) {
        showLiveState(error && error.message ? error.message : "this page could not be read again: reload it");
        done();
      });
  }

  function swapLiveParts(fresh) {
    document.querySelectorAll("[data-live]").forEach(function (old) {
      var name = old.getAttribute("data-live");
      var next = fresh.querySelector('[data-live="' + name + '"]');
      if (!next || served[name] === next.innerHTML) { return; } // unchanged
      served[name] = next.innerHTML;
      var kept = formState(old);
      var opened = openedIn(old);
      var statuses = statusesIn(old);
      var part = document.importNode(next, true);
      keepHistories(old, part);
      old.replaceWith(part);
      reopen(part, opened);
      restoreForms(part, kept);
      flashChanged(part, statuses);
    });
  }

  // The <details> the operator opened (a stale task's reclaim form...), by their job or
  // their place: open again after a reading.
  function detailsKey(el, i) {
    var job = el.closest("[data-job-id]");
    return job ? "job|" + job.getAttribute("data-job-id") : "at|" + i;
  }

  function openedIn(root) {
    var opened = {};
    root.querySelectorAll("details").forEach(function (el, i) {
      if (el.open) { opened[detailsKey(el, i)] = true; }
    });
    return opened;
  }

  function reopen(root, opened) {
    root.querySelectorAll("details").forEach(function (el, i) {
      if (opened[detailsKey(el, i)]) { el.open = true; }
    });
  }

  function statusesIn(root) {
    var found = {};
    [root].concat(Array.prototype.slice.call(root.querySelectorAll("[data-status]")))
      .forEach(function (el) {
        if (el.hasAttribute && el.hasAttribute("data-status")) {
          found[(el.getAttribute("data-job-id") || "") + "|" + el.tagName] = el.getAttribute("data-status");
        }
      });
    return found;
  }

  function flashChanged(root, before) {
    [root].concat(Array.prototype.slice.call(root.querySelectorAll("[data-status]")))
      .forEach(function (el) {
        var key = (el.getAttribute("data-job-id") || "") + "|" + el.tagName;
        if (el.hasAttribute("data-status") && key in before &&
            before[key] !== el.getAttribute("data-status")) { flash(el); }
      });
  }

  // What the operator typed or chose, by form and field, and where the focus was.
  function fieldKey(field) {
    var form = field.form ? field.form.getAttribute("action") : "";
    var which = field.type === "radio" || field.type === "checkbox" ? "|" + field.value : "";
    return form + "|" + field.name + which;
  }

  function formState(root) {
    var kept = {values: {}, focus: null, selection: null};
    root.querySelectorAll("input, select, textarea").forEach(function (field) {
      if (!field.name || field.type === "hidden") { return; }
      var key = fieldKey(field);
      if (field.type === "radio" || field.type === "checkbox") {
        if (field.checked !== field.defaultChecked) { kept.values[key] = field.checked; }
      } else if (field.tagName === "SELECT" || field.value !== field.defaultValue) {
        kept.values[key] = field.value;
      }
      if (field === document.activeElement) {
        kept.focus = key;
        try { kept.selection = [field.selectionStart, field.selectionEnd]; } catch (e) { /* no selection */ }
      }
    });
    return kept;
  }

  function restoreForms(root, kept) {
    root.querySelectorAll("input, select, textarea").forEach(function (field) {
      if (!field.name || field.type === "hidden") { return; }
      var key = fieldKey(field);
      if (key in kept.values) {
        if (field.type === "radio" || field.type === "checkbox") { field.checked = kept.values[key]; }
        else { field.value = kept.values[key]; }
      }
      if (key === kept.focus) {
        field.focus();
        if (kept.selection && kept.selection[0] !== null) {
          try { field.setSelectionRange(kept.selection[0], kept.selection[1]); } catch (e) { /* not text */ }
        }
      }
    });
  }

  // A history shown stays as it was (read again if its job had events); a new one
  // is read now.
  function keepHistories(old, part) {
    part.querySelectorAll("[data-history]").forEach(function (section) {
      var job = section.getAttribute("data-job");
      var was = Array.prototype.filter.call(old.querySelectorAll("[data-history]"),
        function (candidate) { return candidate.getAttribute("data-job") === job; })[0];
      if (!was) { loadHistory(section); return; }
      section.replaceWith(was);
    });
  }

  // ---- the event stream ----

  function onJobEvent(message) {
    var ev;
    try { ev = JSON.parse(message.data); } catch (e) { return; }
    if (!ev || typeof ev.job_id !== "string" || typeof ev.status !== "string") { return; }
    rowsOf(ev.channel, ev.job_id).forEach(function (el) { setStatus(el, ev.status); });
    logEvent(ev);
    eventsOf[ev.job_id] = true;
    readSoon();
  }

  function listen() {
    var url = body.getAttribute("data-events");
    if (!url || !window.EventSource) { return; }
    var source = new EventSource(url);
    // Marked while the stream is open (what a test waits for before it makes an event).
    source.addEventListener("open", function () { body.setAttribute("data-events-open", ""); });
    source.addEventListener("error", function () { body.removeAttribute("data-events-open"); });
    source.addEventListener("job", onJobEvent);
    source.addEventListener("reset", function () { // missed events: read it all again
      everyJob = true;
      readSoon();
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  // ---- histories and devices ----

  function describe(item) {
    var detail = item.detail && typeof item.detail === "object" ? item.detail : {};
    var parts = [];
    Object.keys(detail).forEach(function (name) {
      var value = detail[name];
      if (value === null || value === undefined) { return; }
      parts.push(name + ": " + (typeof value === "object" ? JSON.stringify(value) : String(value)));
    });
    return parts.join(", ");
  }

  function loadHistory(section) {
    var channel = section.getAttribute("data-history");
    var base = body.getAttribute(channel === "task" ? "data-task-events" : "data-query-events");
    if (!base) { return; }
    var id = section.getAttribute("data-job");
    fetch(base + encodeURIComponent(id) + "/events", {credentials: "same-origin"})
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (reply) {
        var empty = section.querySelector(".history-empty");
        var list = section.querySelector(".timeline");
        if (!reply || !Array.isArray(reply.items)) {
          if (empty) { empty.textContent = "The history could not be read."; }
          return;
        }
        list.textContent = "";
        reply.items.forEach(function (item) {
          var li = document.createElement("li");
          li.className = "event k-" + String(item.kind).replace(/[^a-z_]/g, "") +
            " st-" + String(item.status).replace(/[^a-z_]/g, "");
          var kind = document.createElement("strong");
          kind.textContent = " " + item.kind;
          var rest = document.createElement("span");
          var text = describe(item);
          rest.textContent = " → " + item.status + (text ? " (" + text + ")" : "");
          li.appendChild(timeOf(item.at));
          li.appendChild(kind);
          li.appendChild(rest);
          list.appendChild(li);
        });
        if (empty) { empty.hidden = reply.items.length > 0; empty.textContent = "No events yet."; }
      })
      .catch(function () { /* the page keeps what it shows */ });
  }

  function loadDevices() {
    var url = body.getAttribute("data-devices");
    var table = document.querySelector("table.devices tbody");
    if (!url || !table) { return; }
    var labels = Array.prototype.map.call(
      document.querySelectorAll("table.devices thead th"), function (th) { return th.textContent; });
    fetch(url + "?limit=100", {credentials: "same-origin"})
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (reply) {
        table.textContent = "";
        var items = reply && Array.isArray(reply.items) ? reply.items : [];
        if (!items.length) {
          var tr = document.createElement("tr");
          var td = document.createElement("td");
          td.colSpan = 5;
          td.className = "muted";
          td.textContent = reply ? "No device seen." : "The devices could not be read.";
          tr.appendChild(td);
          table.appendChild(tr);
          return;
        }
        items.forEach(function (d) {
          var tr = document.createElement("tr");
          [d.device_id, d.tenant, d.state, d.last_seen_at, d.live_tasks].forEach(function (v, i) {
            var td = document.createElement("td");
            td.setAttribute("data-label", labels[i] || "");
            if (i === 2) {
              var s = document.createElement("span");
              s.className = "status s-" + String(v).replace(/[^a-z_]/g, "");
              s.textContent = String(v);
              td.appendChild(s);
            } else if (i === 3 && v) {
              td.appendChild(timeOf(v));
            } else {
              td.textContent = v === null || v === undefined ? "" : String(v);
            }
            if (i === 4) { td.className = "num"; }
            tr.appendChild(td);
          });
          table.appendChild(tr);
        });
      })
      .catch(function () { /* the page keeps what it shows */ });
  }

  document.querySelectorAll("[data-live]").forEach(function (part) {
    served[part.getAttribute("data-live")] = part.innerHTML; // as served, before any change
  });
  setUpThemeToggle();
  showRefused();
  document.querySelectorAll("[data-history]").forEach(loadHistory);
  loadDevices();
  listen();
}());
