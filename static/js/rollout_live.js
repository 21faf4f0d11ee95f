/* The rollout page, live: every few seconds it reads /api/v1/rollouts/<id>/ and its events/ (the
   rollout's and its nodes' audit events, newest first), and redraws the status, the progress, a bar
   per node and the event log from them, so
   every number shown is the API's. The action buttons POST to /api/v1/rollouts/<id>/<action>/
   with the page's CSRF cookie; a refusal (404, 409, ...) is shown, not hidden. Plain JS. */
(function () {
  "use strict";
  var root = document.getElementById("rollout");
  var wordsNode = document.getElementById("rollout-live-words");
  if (!root || !wordsNode) { return; }
  var words = JSON.parse(wordsNode.textContent);
  var apiUrl = root.dataset.apiUrl;
  var eventsUrl = root.dataset.eventsUrl;
  var pollMs = 1000 * (parseFloat(root.dataset.pollSeconds) || 3);

  function cookie(name) {
    var found = document.cookie.split("; ").find(function (c) { return c.indexOf(name + "=") === 0; });
    return found ? decodeURIComponent(found.slice(name.length + 1)) : "";
  }

  function cell(tag, text, className) {
    var el = document.createElement(tag);
    el.textContent = text;
    if (className) { el.className = className; }
    return el;
  }

  function badge(text, kind) {
    return cell("span", text, "badge badge--" + kind);
  }

  function bar(percent, hot) {
    var meter = cell("span", "", "meter");
    var outer = cell("span", "", "bar node-bar");
    var fill = cell("span", "", "bar__fill" + (hot ? " bar__fill--hot" : ""));
    fill.style.width = percent + "%";
    outer.appendChild(fill);
    meter.appendChild(outer);
    meter.appendChild(cell("span", percent + " %", "meter__text"));
    return meter;
  }

  function drawCounts(nodes) {
    var counted = 0;
    words.counted_states.forEach(function (state) {
      var n = nodes.filter(function (node) { return node.state === state; }).length;
      counted += n;
      var item = document.querySelector('#rollout-counts [data-count="' + state + '"] strong');
      if (item) { item.textContent = String(n); }
    });
    var other = document.querySelector('#rollout-counts [data-count="other"] strong');
    if (other) { other.textContent = String(nodes.length - counted); }
  }

  function drawRollout(data) {
    var status = document.getElementById("rollout-status");
    status.textContent = words.status_labels[data.status] || data.status;
    status.className = "badge badge--" + (words.status_badges[data.status] || "muted");
    status.dataset.status = data.status;
    // One decimal, as the API rounds it and the page first rendered it.
    var percent = Number(data.progress_percent).toFixed(1);
    document.getElementById("rollout-progress").textContent = percent + " %";
    var progress = document.getElementById("rollout-progress-bar");
    progress.setAttribute("aria-valuenow", percent);
    progress.querySelector(".bar__fill").style.width = percent + "%";
    document.getElementById("rollout-message").textContent = data.message || "";
    var windowWait = document.getElementById("rollout-window-wait");
    var waiting = data.waiting_for_window || "";
    windowWait.textContent = waiting.charAt(0).toUpperCase() + waiting.slice(1);
    windowWait.hidden = !waiting;
    var body = document.querySelector("#rollout-nodes tbody");
    var rows = data.nodes.map(function (node) {
      var row = document.createElement("tr");
      row.dataset.node = node.node;
      var name = document.createElement("th");
      name.scope = "row";
      var link = cell("a", node.node);
      link.href = "/nodes/" + encodeURIComponent(node.node) + "/";
      name.appendChild(link);
      row.appendChild(name);
      row.appendChild(cell("td", node.batch_index === null ? "—" : String(node.batch_index), "num"));
      var state = document.createElement("td");
      var kind = words.node_badges[node.state] || "warn";
      state.appendChild(badge(node.state, kind));
      row.appendChild(state);
      var step = document.createElement("td");
      if (node.state in words.step_percent) {
        step.appendChild(bar(words.step_percent[node.state], false));
      } else {  // skipped, failed, rolled back: how it ended, not a percentage
        step.appendChild(cell("span", words.step_words[node.state] || node.state, "muted"));
      }
      row.appendChild(step);
      row.appendChild(cell("td", node.reason || "—", "wrap"));
      return row;
    });
    body.replaceChildren.apply(body, rows);
    drawCounts(data.nodes);
    var offered = words.actions[data.status] || [];
    document.querySelectorAll("#rollout-actions [data-action]").forEach(function (button) {
      button.hidden = offered.indexOf(button.dataset.action) < 0;
    });
  }

  function drawEvents(events) {
    var body = document.querySelector("#rollout-events tbody");
    if (!events.length) { return; }
    body.replaceChildren.apply(body, events.map(function (event) {
      var row = document.createElement("tr");
      var when = document.createElement("td");
      var time = cell("time", event.at.replace("T", " ").slice(0, 19));
      time.dateTime = event.at;
      when.appendChild(time);
      row.appendChild(when);
      row.appendChild(cell("td", event.node || "—"));
      row.appendChild(cell("td", event.actor));
      var verb = document.createElement("td");
      verb.appendChild(cell("code", event.verb));
      row.appendChild(verb);
      row.appendChild(cell("td", event.reason || "—", "wrap"));
      return row;
    }));
  }

  function getJson(url) {
    return fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" }).then(function (r) {
      if (!r.ok) { throw new Error(url + ": " + r.status); }
      return r.json();
    });
  }

  function refresh() {
    return Promise.all([getJson(apiUrl), getJson(eventsUrl)]).then(function (both) {
      drawRollout(both[0]);
      drawEvents(both[1]);
      root.dataset.refreshed = String(Date.now());
      document.getElementById("rollout-refreshed").textContent = "last at " + new Date().toLocaleTimeString();
    }).catch(function (error) {
      document.getElementById("rollout-refreshed").textContent = "refresh failed (" + error.message + ")";
    });
  }

  function show(text, ok) {
    var line = document.getElementById("action-result");
    line.hidden = false;
    line.textContent = text;
    line.className = "status-line " + (ok ? "status-line--ok" : "status-line--bad");
  }

  document.querySelectorAll("#rollout-actions [data-action]").forEach(function (button) {
    button.addEventListener("click", function () {
      var action = button.dataset.action;
      button.disabled = true;
      fetch(apiUrl + action + "/", {
        method: "POST", credentials: "same-origin",
        headers: { Accept: "application/json", "Content-Type": "application/json", "X-CSRFToken": cookie("csrftoken") },
        body: "{}",
      }).then(function (r) {
        return r.text().then(function (text) {
          var detail = "";
          try { var body = JSON.parse(text); detail = body.detail || (body.reasons || []).join("; ") || ""; } catch (e) { detail = ""; }
          if (r.ok) {
            show(action + ": done.", true);
          } else if (r.status === 404) {
            show(action + " refused (404): " + (detail || "this action is not available on this server yet."), false);
          } else {
            show(action + " refused (" + r.status + ")" + (detail ? ": " + detail : "."), false);
          }
        });
      }).catch(function (error) {
        show(action + " failed: " + error.message, false);
      }).then(function () {
        button.disabled = false;
        return refresh();
      });
    });
  });

  refresh();
  window.setInterval(refresh, pollMs);
}());
