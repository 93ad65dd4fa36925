"""The wire: typed client commands, typed server events, and the one decoder of each.

``commands`` decodes client frames (:func:`~app.backend.protocol.commands.decode_command`);
``events`` renders server events (``ServerEvent.to_wire``); ``decoder`` turns a server's wire
events back into typed events (for the remote backend and our clients).
"""
