// The web chat: sends the form with fetch, shows the reply as the gateway streams it
// (Server-Sent Events from /chat/events). The HTML of a reply is rendered and escaped by the
// server (Markdown with raw HTML off); everything the page itself adds is set as text.
(function () {
  "use strict";
  var form = document.getElementById("chat-form");
  if (!form) { return; }
  var list = document.getElementById("messages");
  var textarea = form.querySelector("textarea");
  var fileInput = form.querySelector("input[type=file]");
  var chosen = document.getElementById("files-chosen");
  var errorBox = document.getElementById("chat-error");
  var stopButton = document.getElementById("stop");
  var status = document.getElementById("status");
  var csrf = form.querySelector("input[name=csrf]").value;
  var clientId = form.querySelector("input[name=client_id]");
  var MAX_FILE_BYTES = 20 * 1024 * 1024;
  var busy = false;
  var typingUntil = 0;

  function scrollDown() { window.scrollTo(0, document.body.scrollHeight); }

  function showError(text) {
    errorBox.textContent = text;
    errorBox.hidden = !text;
  }

  function refreshStatus() {
    var writing = busy || Date.now() < typingUntil;
    status.hidden = !writing;
    stopButton.hidden = !busy;
  }

  function dropEmptyNote() {
    var empty = list.querySelector(".empty");
    if (empty) { empty.remove(); }
  }

  function addUserBubble(text, files) {
    dropEmptyNote();
    var item = document.createElement("li");
    item.className = "msg user";
    var body = document.createElement("div");
    body.className = "body";
    var p = document.createElement("p");
    p.className = "plain";
    p.textContent = text;
    body.appendChild(p);
    files.forEach(function (name) {
      var chip = document.createElement("span");
      chip.className = "chip";
      chip.textContent = name;
      body.appendChild(chip);
    });
    item.appendChild(body);
    list.appendChild(item);
    scrollDown();
  }

  function showReply(id, html) {
    dropEmptyNote();
    var item = list.querySelector('li[data-mid="' + CSS.escape(id) + '"]');
    if (!item) {
      item = document.createElement("li");
      item.className = "msg assistant";
      item.setAttribute("data-mid", id);
      var body = document.createElement("div");
      body.className = "body";
      item.appendChild(body);
      list.appendChild(item);
    }
    item.querySelector(".body").innerHTML = html;  // the server's escaped rendering
    typingUntil = 0;
    refreshStatus();
    scrollDown();
  }

  function send(text) {
    var data = new FormData(form);
    if (text !== undefined) {
      data.set("text", text);
      data.delete("files");
    }
    var shown = String(data.get("text") || "").trim();
    var files = data.getAll("files").filter(function (f) { return f && f.name; });
    if (!shown && !files.length) { return; }
    var big = files.filter(function (f) { return f.size > MAX_FILE_BYTES; });
    if (big.length) {
      showError("Not sent: " + big[0].name + " is larger than 20 MB.");
      return;
    }
    showError("");
    fetch("/chat/send", {
      method: "POST",
      body: data,
      headers: { "X-CSRF-Token": csrf },
      credentials: "same-origin"
    }).then(function (response) {
      return response.json().then(
        function (body) { return { ok: response.ok, body: body }; },
        function () { return { ok: false, body: { error: "Not sent (" + response.status + ")." } }; }
      );
    }).then(function (result) {
      if (!result.ok) { showError(result.body.error || "Not sent."); return; }
      addUserBubble(shown, files.map(function (f) { return f.name; }));
      clientId.value = result.body.client_id;
      if (text === undefined) {
        textarea.value = "";
        fileInput.value = "";
        chosen.hidden = true;
        autoSize();
      }
      typingUntil = Date.now() + 5000;
      refreshStatus();
    }).catch(function () {
      showError("Not sent: the page cannot reach Pinch. Is the gateway running?");
    });
  }

  function autoSize() {
    textarea.style.height = "auto";
    textarea.style.height = Math.min(textarea.scrollHeight, 240) + "px";
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    send();
  });
  textarea.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  textarea.addEventListener("input", autoSize);
  fileInput.addEventListener("change", function () {
    var names = Array.prototype.map.call(fileInput.files, function (f) { return f.name; });
    chosen.textContent = names.length ? "Attached: " + names.join(", ") : "";
    chosen.hidden = !names.length;
  });
  document.getElementById("new-session").addEventListener("click", function () { send("/new"); });
  stopButton.addEventListener("click", function () {
    fetch("/chat/stop", {
      method: "POST",
      headers: { "X-CSRF-Token": csrf },
      credentials: "same-origin"
    });
  });

  var events = new EventSource("/chat/events");
  events.addEventListener("message", function (event) {
    var data = JSON.parse(event.data);
    showReply(data.id, data.html);
  });
  events.addEventListener("typing", function () {
    typingUntil = Date.now() + 5000;
    refreshStatus();
  });
  events.addEventListener("state", function (event) {
    busy = JSON.parse(event.data).busy;
    refreshStatus();
  });
  setInterval(refreshStatus, 1000);
  scrollDown();
})();
