"""Tasks and data: task files and formats, a campaign's sources and held-out split, supervised data, the chats shown to the model."""
