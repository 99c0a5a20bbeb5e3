// The console's live parts: job rows follow the event stream, histories and
// devices are read from the gateway (the routes are named by the body's data-*
// attributes, set only for a signed-in page).
(function () {
  "use strict";
  var body = document.body;
  var LOG_ITEMS = 20;

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
    var reclaim = el.querySelector("form.reclaim");
    if (reclaim && status !== "stale") { reclaim.hidden = true; } // someone resolved it
    flash(el);
  }

  function logEvent(ev) {
    var log = document.getElementById("live-log");
    if (!log) { return; }
    var muted = log.querySelector(".muted");
    if (muted) { muted.remove(); }
    var item = document.createElement("li");
    item.textContent = ev.at + " " + ev.channel + " " + ev.job_id + " " + ev.kind + " → " + ev.status;
    log.insertBefore(item, log.firstChild);
    while (log.children.length > LOG_ITEMS) { log.removeChild(log.lastChild); }
  }

  function onJobEvent(message) {
    var ev;
    try { ev = JSON.parse(message.data); } catch (e) { return; }
    if (!ev || typeof ev.job_id !== "string" || typeof ev.status !== "string") { return; }
    rowsOf(ev.channel, ev.job_id).forEach(function (el) {
      setStatus(el, ev.status);
      var history = el.querySelector("[data-history]");
      if (history) { loadHistory(history); }
    });
    logEvent(ev);
  }

  function showLiveState(text) {
    var state = document.getElementById("live-state");
    if (!state) { return; }
    state.textContent = text;
    state.hidden = false;
  }

  function listen() {
    var url = body.getAttribute("data-events");
    if (!url || !window.EventSource) { return; }
    var source = new EventSource(url);
    source.addEventListener("job", onJobEvent);
    source.addEventListener("reset", function () {
      showLiveState("Some job events were missed: reload the page to see the current state.");
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

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
          li.className = "event k-" + String(item.kind).replace(/[^a-z_]/g, "");
          var time = document.createElement("time");
          time.dateTime = item.at;
          time.textContent = String(item.at).replace("T", " ").replace("Z", "");
          var kind = document.createElement("strong");
          kind.textContent = " " + item.kind;
          var rest = document.createElement("span");
          var text = describe(item);
          rest.textContent = " → " + item.status + (text ? " (" + text + ")" : "");
          li.appendChild(time);
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
            if (i === 2) {
              var s = document.createElement("span");
              s.className = "status s-" + String(v).replace(/[^a-z_]/g, "");
              s.textContent = String(v);
              td.appendChild(s);
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

  document.querySelectorAll("[data-history]").forEach(loadHistory);
  loadDevices();
  listen();
}());
