// The Default-mode chat room in the browser: negotiate at the app server (which redirects to
// the service), then call the hub it runs: Join, Send, Poll, Leave. A poll is a client
// result: the app server invokes `answerPoll` on each member and waits for what the handler
// returns, here the Yes or No its user clicks.
"use strict";

const $ = (id) => document.getElementById(id);
let connection = null;

function show(text, kind) {
  const item = document.createElement("li");
  if (kind) item.className = kind;
  item.textContent = text;
  $("messages").append(item);
  item.scrollIntoView({ block: "nearest" });
}

function status(text, connected) {
  $("status").textContent = text;
  $("status").classList.toggle("connected", connected);
  $("join-form").hidden = connected;
  $("send-form").hidden = !connected;
  $("poll-form").hidden = !connected;
}

/** Shows the question and resolves with the button the user clicks ("yes" or "no"). */
function askUser(question, asker) {
  $("poll-text").textContent = `${asker} asks: ${question}`;
  $("poll-question").hidden = false;
  return new Promise((resolve) => {
    const answer = (value) => () => {
      $("poll-question").hidden = true;
      resolve(value);
    };
    $("poll-yes").onclick = answer("yes");
    $("poll-no").onclick = answer("no");
  });
}

$("join-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const name = $("name").value.trim();
  const room = $("room").value.trim();
  connection = new signalR.HubConnectionBuilder()
    .withUrl(`${location.origin}/chat`, { headers: { "x-chat-user": name } })
    .configureLogging(signalR.LogLevel.Warning)
    .build();
  connection.on("newMessage", (who, text) => {
    const item = document.createElement("li");
    const author = document.createElement("b");
    author.textContent = `${who}: `;
    item.append(author, text);
    $("messages").append(item);
    item.scrollIntoView({ block: "nearest" });
  });
  connection.on("notice", (text) => show(text, "notice"));
  connection.on("pollResult", (question, answers) => {
    const said = Object.entries(answers).map(([who, answer]) => `${who}: ${answer}`).join(", ");
    show(`poll "${question}": ${said || "nobody else is here"}`, "poll");
  });
  // A handler that returns a value answers the server's invocation (client results).
  connection.on("answerPoll", (question, asker) => askUser(question, asker));
  connection.onclose(() => status("not connected", false));
  try {
    await connection.start();
    await connection.invoke("Join", name, room);
    status(`in ${room} as ${name}`, true);
    $("text").focus();
  } catch (error) {
    status(`could not join: ${error.message}`, false);
  }
});

$("send-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = $("text").value;
  $("text").value = "";
  await connection.invoke("Send", text);
});

$("poll-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const question = $("question").value;
  $("question").value = "";
  await connection.invoke("Poll", question);
});

$("leave").addEventListener("click", async () => {
  await connection.invoke("Leave");
  await connection.stop();
});
