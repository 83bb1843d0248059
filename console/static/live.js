// live.js keeps a cmdq dashboard page current without reloading it. The
// page marks the part that changes with data-refresh="SECONDS"; this
// script fetches the same URL again with the header X-Cmdq-Refresh: 1 and
// swaps in the new version of that part, keeping ticked checkboxes, open
// <details> and focus. When the part also has data-stream="URL" (a
// command's page), it listens to that event stream and refreshes when it
// says "change" ("alive" says the page is current); otherwise, or while
// the stream is down, it refreshes every SECONDS. Nothing runs while the
// tab is hidden. A line "Updated N s ago" says how fresh the page is. The
// page works without it: every change is a normal link or form. No inline
// script, nothing from elsewhere (the page's Content-Security-Policy
// allows only this origin, EventSource included).
(function () {
  "use strict";

  var live = document.querySelector("[data-refresh]");
  var stamp = document.getElementById("updated");

  // "Select all" boxes (data-select-all): tick every box named by the value.
  function wireSelectAll(root) {
    var boxes = root.querySelectorAll("input[data-select-all]");
    for (var i = 0; i < boxes.length; i++) {
      var all = boxes[i];
      all.hidden = false;
      if (all.parentElement && all.parentElement.tagName === "LABEL") {
        all.parentElement.hidden = false;
      }
      all.addEventListener("change", function (ev) {
        var name = ev.target.getAttribute("data-select-all");
        var items = document.querySelectorAll('input[type=checkbox][name="' + name + '"]');
        for (var j = 0; j < items.length; j++) {
          items[j].checked = ev.target.checked;
        }
      });
    }
  }
  wireSelectAll(document);

  // The preferences form at the foot of the page (theme, auto-refresh):
  // a change applies at once and is stored (POST, the cmdq_prefs cookie)
  // in the background; without this script the form's Apply button does
  // the same with a page load.
  var root = document.documentElement;
  var pref = root.getAttribute("data-refresh-pref") || "auto";
  var prefsForm = document.getElementById("prefs");
  var onPref = null; // set below when the page refreshes itself

  function savePrefs() {
    if (!prefsForm) {
      return;
    }
    fetch(prefsForm.action, {
      method: "POST", credentials: "same-origin", headers: { "X-Cmdq-Refresh": "1" },
      body: new URLSearchParams(new FormData(prefsForm))
    }).catch(function () {});
  }

  function setPref(value) {
    pref = value;
    root.setAttribute("data-refresh-pref", value);
    var sel = document.getElementById("pref-refresh");
    if (sel) {
      sel.value = value;
    }
    if (onPref) {
      onPref();
    }
  }

  if (prefsForm) {
    var apply = prefsForm.querySelector(".apply");
    if (apply) {
      apply.hidden = true;
    }
    var theme = document.getElementById("pref-theme");
    if (theme) {
      theme.addEventListener("change", function () {
        if (theme.value === "system") {
          root.removeAttribute("data-theme");
        } else {
          root.setAttribute("data-theme", theme.value);
        }
        savePrefs();
      });
    }
    var refreshSel = document.getElementById("pref-refresh");
    if (refreshSel) {
      refreshSel.addEventListener("change", function () {
        setPref(refreshSel.value);
        savePrefs();
      });
    }
  }

  if (!live || !stamp) {
    return;
  }
  // pageEvery is the page's own refresh (0: it never changes again);
  // every what the viewer's preference makes of it (0: paused or final).
  var pageEvery = Number(live.getAttribute("data-refresh")) * 1000;
  function effective() {
    if (!(pageEvery > 0) || pref === "off") {
      return 0;
    }
    var n = Number(pref) * 1000;
    return n > 0 ? n : pageEvery;
  }
  var every = effective();
  var streamURL = live.getAttribute("data-stream");
  var at = Date.parse(stamp.getAttribute("datetime"));
  var problem = "";
  var busy = false;
  var again = false;
  var stopped = !(every > 0);
  var timer = 0;
  var es = null;
  var streaming = false;

  // A Pause / Resume button beside the freshness line (while the page
  // can change): it sets the auto-refresh preference.
  var pause = null;
  if (pageEvery > 0 && stamp.parentNode) {
    pause = document.createElement("button");
    pause.type = "button";
    pause.id = "pause";
    stamp.parentNode.appendChild(pause);
    pause.addEventListener("click", function () {
      setPref(pref === "off" ? "auto" : "off");
      savePrefs();
    });
  }
  function showPause() {
    if (pause) {
      pause.textContent = pref === "off" ? "Resume" : "Pause";
      pause.title = pref === "off" ? "Refresh this page again as it changes" : "Stop refreshing this page (remembered)";
    }
  }
  showPause();

  function ago(ms) {
    var s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) {
      return s + " s ago";
    }
    var m = Math.floor(s / 60);
    return m < 60 ? m + " min ago" : Math.floor(m / 60) + " h ago";
  }

  function show() {
    var text = "Updated " + ago(Date.now() - at);
    if (problem) {
      text += " · " + problem;
    } else if (pref === "off" && pageEvery > 0) {
      text += " · auto-refresh paused";
    } else if (streaming) {
      text += " · live";
    } else if (!stopped) {
      text += " · refreshes every " + every / 1000 + " s";
    }
    stamp.textContent = text;
    stamp.title = new Date(at).toISOString();
  }

  // key names a form control or <details> across refreshes.
  function key(el) {
    if (el.id) {
      return "#" + el.id;
    }
    if (el.name) {
      return el.name + "=" + (el.value || "");
    }
    return "";
  }

  function swap(fresh) {
    var checked = {};
    var boxes = live.querySelectorAll("input[type=checkbox]");
    for (var i = 0; i < boxes.length; i++) {
      if (boxes[i].checked) {
        checked[key(boxes[i])] = true;
      }
    }
    var open = {};
    var details = live.querySelectorAll("details[id]");
    for (i = 0; i < details.length; i++) {
      open[details[i].id] = details[i].open;
    }
    var focused = document.activeElement && live.contains(document.activeElement) ? key(document.activeElement) : "";

    live.innerHTML = fresh.innerHTML;

    boxes = live.querySelectorAll("input[type=checkbox]");
    for (i = 0; i < boxes.length; i++) {
      if (checked[key(boxes[i])]) {
        boxes[i].checked = true;
      }
    }
    details = live.querySelectorAll("details[id]");
    for (i = 0; i < details.length; i++) {
      if (details[i].id in open) {
        details[i].open = open[details[i].id];
      }
    }
    if (focused) {
      var els = live.querySelectorAll("input,button,a,summary,details");
      for (i = 0; i < els.length; i++) {
        if (key(els[i]) === focused) {
          els[i].focus();
          break;
        }
      }
    }
    wireSelectAll(live);
    syncFlash();
  }

  // A message after a requeue says which state the command is in ("It is
  // retrying now"): keep it the state the page shows, never another.
  function syncFlash() {
    var said = document.getElementById("flash-state");
    var status = document.getElementById("status");
    if (!said || !status) {
      return;
    }
    var now = status.getAttribute("data-state");
    var badge = status.querySelector(".badge");
    if (!now || now === said.getAttribute("data-state") || !badge) {
      return;
    }
    said.setAttribute("data-state", now);
    said.textContent = " It is ";
    said.appendChild(badge.cloneNode(true));
    said.appendChild(document.createTextNode(" now."));
  }

  // The timer refreshes only while no stream says when to.
  function schedule() {
    clearTimeout(timer);
    if (!stopped && !streaming && !document.hidden) {
      timer = setTimeout(refresh, every);
    }
  }

  function closeStream() {
    if (es) {
      es.close();
      es = null;
    }
    streaming = false;
  }

  function openStream() {
    if (!streamURL || stopped || es || document.hidden || !window.EventSource) {
      return;
    }
    es = new EventSource(streamURL);
    es.addEventListener("alive", function (ev) {
      streaming = true;
      problem = "";
      var t = Date.parse(ev.data);
      if (t > at) {
        at = t; // nothing changed up to then
      }
      clearTimeout(timer);
      show();
    });
    es.addEventListener("change", function () {
      refresh();
    });
    es.onerror = function () {
      // Down (the browser retries by itself): poll meanwhile.
      streaming = false;
      if (es && es.readyState === EventSource.CLOSED) {
        es = null;
      }
      show();
      schedule();
    };
  }

  function refresh() {
    if (stopped) {
      return;
    }
    if (busy) {
      again = true; // a change came while a refresh ran: refresh once more
      return;
    }
    if (document.hidden) {
      return; // refreshed when shown again
    }
    busy = true;
    again = false;
    fetch(location.href, { credentials: "same-origin", cache: "no-store", headers: { "X-Cmdq-Refresh": "1" } })
      .then(function (r) {
        if (r.redirected) {
          // The session ended (the login page answered): stop, say so.
          stopped = true;
          problem = "your session ended; reload the page to log in";
          return null;
        }
        if (!r.ok) {
          problem = "refresh failed (HTTP " + r.status + "); retrying";
          return null;
        }
        return r.text();
      })
      .then(function (text) {
        if (text === null) {
          return;
        }
        var doc = new DOMParser().parseFromString(text, "text/html");
        var fresh = doc.querySelector("[data-refresh]");
        var freshStamp = doc.getElementById("updated");
        if (!fresh || !freshStamp) {
          stopped = true;
          problem = "this page changed; reload it";
          return;
        }
        problem = "";
        at = Date.parse(freshStamp.getAttribute("datetime"));
        if (fresh.innerHTML !== live.innerHTML) {
          swap(fresh);
        }
        pageEvery = Number(fresh.getAttribute("data-refresh")) * 1000;
        every = effective();
        streamURL = fresh.getAttribute("data-stream");
        if (!(pageEvery > 0)) {
          stopped = true; // nothing more will change (a final state)
          if (pause) {
            pause.remove();
            pause = null;
          }
        } else if (!(every > 0)) {
          stopped = true; // paused
        }
      })
      .catch(function () {
        problem = "the server did not answer; retrying";
      })
      .then(function () {
        busy = false;
        if (stopped || !streamURL) {
          closeStream();
        } else {
          openStream();
        }
        show();
        schedule();
        if (again) {
          refresh();
        }
      });
  }

  // A new auto-refresh preference: pause, resume, or another interval.
  onPref = function () {
    showPause();
    if (!(pageEvery > 0)) {
      return;
    }
    every = effective();
    if (!(every > 0)) {
      stopped = true;
      closeStream();
      clearTimeout(timer);
      show();
      return;
    }
    var was = stopped;
    stopped = false;
    if (was) {
      refresh(); // catch up at once, then follow as chosen
    } else {
      schedule();
      show();
    }
  };

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      closeStream(); // nothing runs for a hidden tab
      clearTimeout(timer);
      show();
    } else {
      refresh();
    }
  });
  setInterval(show, 1000);
  show();
  openStream();
  schedule();
})();
