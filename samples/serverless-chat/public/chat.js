// The chat room in the browser: join (negotiate at the app, then connect to the service it
// names), send (a hub invocation the service passes to the app as an upstream webhook), leave.
// The app answers with REST sends to the room's group: "newMessage" and "notice".
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
}

$("join-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const name = $("name").value.trim();
  const room = $("room").value.trim();
  // Negotiate at the app (`/api/negotiate`), which answers { url, accessToken } as Azure
  // Functions' SignalR binding does; the client then connects to the service at `url`.
  connection = new signalR.HubConnectionBuilder()
    .withUrl(`${location.origin}/api`, { headers: { "x-chat-user": name, "x-chat-room": room } })
    .withAutomaticReconnect()
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
  connection.onreconnecting(() => status("reconnecting…", true));
  connection.onreconnected(() => status(`in ${room} as ${name}`, true));
  connection.onclose(() => status("not connected", false));
  try {
    await connection.start();
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
  // No invocation id (send, not invoke): the service posts it to the app's upstream.
  await connection.send("broadcast", text);
});

$("leave").addEventListener("click", () => connection.stop());
